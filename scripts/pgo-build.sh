#!/usr/bin/env bash
# A profile-guided (PGO) build of `pcielab`: the same code as `cargo build --release`,
# laid out by the compiler for the branches and calls the simulator really takes.
#
#   scripts/pgo-build.sh [--compare]
#
# 1. builds an instrumented `pcielab` (target/pgo/gen),
# 2. runs it on training workloads (the default scenario, the NIC, the SR-IOV DMA
#    engine, DMA streams, enumeration, every repro row), which write profiles,
# 3. merges the profiles and builds `pcielab` again with them: target/pgo/release/pcielab.
#
# The results are the same (PGO changes no behaviour; --compare checks it on the
# training workloads, byte for byte, and times the 64-byte DPDK NIC run both ways).
# Needs the `llvm-profdata` of the toolchain's LLVM: `rustup component add llvm-tools`
# (this script runs that when it is missing; a system llvm-profdata of another LLVM
# version cannot read the profiles).
set -euo pipefail
cd "$(dirname "$0")/.."
compare=0
case "${1:-}" in
  --compare) compare=1 ;;
  "") ;;
  *)
    echo "usage: scripts/pgo-build.sh [--compare]" >&2
    exit 2
    ;;
esac

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [[ ! -x "$profdata" ]]; then
  echo "pgo-build: adding the llvm-tools component (for llvm-profdata)" >&2
  rustup component add llvm-tools >&2
fi
[[ -x "$profdata" ]] || {
  echo "pgo-build: no llvm-profdata at $profdata after 'rustup component add llvm-tools'" >&2
  exit 2
}

out=target/pgo
rm -rf "$out/profiles" "$out/train" "$out/check-plain" "$out/check-pgo"
mkdir -p "$out/profiles"
profiles=$(cd "$out/profiles" && pwd)

# The workloads, each a `pcielab` argument list (one per line).
workloads() {
  cat <<'EOF'
sim
sim --workload nic --nic simple --sizes 64,256,1518
sim --workload nic --nic batched --sizes 64,256,1518
sim --workload nic --nic batched --dpdk --sizes 64,256,1518 --packets 64000
sim --workload nic --nic batched --dpdk --sizes 64 --burst 8 --packets 64000
sim --workload sriov --vfs 8
sim --workload dma --op rw --count 20000
sim --workload dma --op write --size 256 --count 20000 --burst 8
sim --workload enumerate
repro all --reads 200000
EOF
}

run_all() {
  local bin=$1 dir=$2
  mkdir -p "$dir"
  local i=0
  while read -r line; do
    i=$((i + 1))
    # shellcheck disable=SC2086  # one argument list per line, split on purpose
    "$bin" $line >"$dir/$i.out"
  done < <(workloads)
}

echo "pgo-build: 1/3 instrumented build" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$profiles" CARGO_TARGET_DIR="$out/gen" \
  cargo build --release -q -p pcielab-cli
echo "pgo-build: 2/3 training runs" >&2
run_all "$out/gen/release/pcielab" "$out/train"
"$profdata" merge -o "$out/pcielab.profdata" "$profiles"
echo "pgo-build: 3/3 optimized build" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$(pwd)/$out/pcielab.profdata" CARGO_TARGET_DIR="$out" \
  cargo build --release -q -p pcielab-cli
echo "pgo-build: built $out/release/pcielab" >&2

if [[ $compare == 1 ]]; then
  cargo build --release -q -p pcielab-cli
  run_all target/release/pcielab "$out/check-plain"
  run_all "$out/release/pcielab" "$out/check-pgo"
  if ! diff -r -q "$out/check-plain" "$out/check-pgo" >/dev/null; then
    echo "pgo-build: the PGO build's output differs from the plain build's" >&2
    diff -r "$out/check-plain" "$out/check-pgo" | head -20 >&2
    exit 1
  fi
  echo "pgo-build: same output as the plain build on every training workload"
  nic=(sim --workload nic --nic batched --dpdk --sizes 64 --packets 640000)
  for round in 1 2 3; do
    for b in target/release/pcielab "$out/release/pcielab"; do
      s=$(date +%s%N)
      "$b" "${nic[@]}" >/dev/null
      e=$(date +%s%N)
      printf 'round %d  %-26s %6d ms   (pcielab %s)\n' "$round" "$b" \
        $(((e - s) / 1000000)) "${nic[*]}"
    done
  done
fi
