#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain, on a fresh Debian machine:
#   - pciutils (the real lspci checks our configuration-space dumps),
#   - tshark (the real Wireshark engine checks our dissector),
#   - pkg-config (checks libtlp.pc, the C library's pkg-config file),
#   - Python packages: pytest, ruff, cocotbext-pcie (an independent TLP/DLLP oracle),
#   - cargo-fuzz (fuzz smoke runs).
# Each step is skipped when its tool is already present.
set -euo pipefail

need_apt=()
command -v lspci >/dev/null 2>&1 || need_apt+=(pciutils)
command -v tshark >/dev/null 2>&1 || need_apt+=(tshark)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

py_missing=()
python3 -c "import pytest" 2>/dev/null || py_missing+=(pytest)
python3 -c "import cocotbext.pcie" 2>/dev/null || py_missing+=(cocotbext-pcie cocotb)
command -v ruff >/dev/null 2>&1 || py_missing+=(ruff)
if [ ${#py_missing[@]} -gt 0 ]; then
  echo "installing Python packages: ${py_missing[*]}"
  python3 -m pip install -q --disable-pip-version-check "${py_missing[@]}"
fi

if [ "${PCIELAB_SKIP_FUZZ_INSTALL:-0}" != 1 ] && ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install -q --locked cargo-fuzz
fi
