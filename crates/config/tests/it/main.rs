//! Integration tests of pcielab-config: decoding real dumps of this machine's devices.

mod port_types;
mod real_lspci;
