//! The integration-test binary of pcielab-wire.

mod dllp_oracle;
mod no_alloc;
