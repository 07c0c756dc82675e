//! Integration tests of pcielab-fabric: enumeration of the example topologies, routing,
//! the real `lspci` reading our dumps, and random topologies.

mod common;
mod enumerate;
mod props;
mod real_lspci;
