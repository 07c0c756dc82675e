#!/usr/bin/env bash
# Fuzzing with cargo-fuzz (libFuzzer). On a stable toolchain RUSTC_BOOTSTRAP lets
# cargo-fuzz pass its -Z flags.
#   scripts/fuzz.sh smoke          build every target, run each for a few seconds
#   scripts/fuzz.sh run TARGET N   run TARGET for N executions
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1
seeds_of() {
  case "$1" in
    tlp_*) echo seeds/tlp ;;
    dllp_*) echo seeds/dllp ;;
    dll_*) echo seeds/dll ;;
    capture_*) echo seeds/pcap ;;
    nettlp_control) echo seeds/nettlp_control ;;
    *) echo "seeds/${1%%_*}" ;;
  esac
}
cargo fuzz build -O
case "${1:-smoke}" in
  smoke)
    for t in $(cargo fuzz list); do
      mkdir -p "corpus/$t"
      echo "fuzz $t (5 s)"
      log=$(mktemp)
      if ! cargo fuzz run -O "$t" "corpus/$t" "$(seeds_of "$t")" -- -max_total_time=5 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 40 "$log"
        echo "fuzz target $t failed" >&2
        exit 1
      fi
      grep -E "^stat::number_of_executed_units" "$log" || true
      rm -f "$log"
    done
    ;;
  run)
    mkdir -p "corpus/$2"
    cargo fuzz run -O "$2" "corpus/$2" "$(seeds_of "$2")" -- -runs="$3" -print_final_stats=1
    ;;
  *) echo "usage: scripts/fuzz.sh smoke | run TARGET N" >&2; exit 2 ;;
esac
