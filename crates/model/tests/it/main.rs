mod compat;
