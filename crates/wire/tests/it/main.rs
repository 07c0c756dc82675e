//! Integration tests of pcielab-wire: codec properties, the JSON form, fixed vectors and
//! the cocotbext-pcie oracle vectors.

mod dllp_oracle;
mod dma_tlp;
mod no_alloc;
mod strategies;
mod tlp_props;
mod tlp_vectors;
