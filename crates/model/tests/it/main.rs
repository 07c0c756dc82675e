mod compat;
mod props;
mod tables;
