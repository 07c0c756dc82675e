//! Integration tests of pcielab-config: decoding real dumps of this machine's devices.

mod real_lspci;
