//! The integration-test binary of pcielab-wire.

mod dllp_oracle;
