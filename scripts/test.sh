#!/usr/bin/env bash
# The whole test suite: Rust unit/integration/doc tests of every crate, then the Python
# tests (independent oracles and tool checks) against the freshly built binary.
# The host-lspci test (crates/config/tests/it/real_lspci.rs) needs root and a PCI bus;
# on a machine without them set PCIELAB_NO_HOST_PCI=1 (the test checks that claim).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
cargo build --workspace --all-targets
cargo test --workspace
PCIELAB_BIN="$PWD/target/debug/pcielab" python3 -m pytest -q tests crates/wire/tests/oracle/dllp_vectors.py
