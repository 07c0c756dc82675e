//! Integration tests of pcielab-wire: codec properties, the JSON form, fixed vectors.

mod strategies;
mod tlp_props;
mod tlp_vectors;
