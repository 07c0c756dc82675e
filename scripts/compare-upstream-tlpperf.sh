#!/usr/bin/env bash
# Side-by-side DMA read benchmark: upstream LibTLP's tlpperf against `pcielab tlpperf`,
# both through one `pcielab adapter` on a random loopback pair, alternating 1-second runs.
#
#   scripts/compare-upstream-tlpperf.sh UPSTREAM_TLPPERF [RUNS] [SIZES...]
#
# UPSTREAM_TLPPERF is a tlpperf binary you built from upstream LibTLP yourself (it is not
# part of this repository). Per run and size it prints upstream's transactions/s (a plain
# run) and its p99 latency (a `-M` latency-mode run: one integer-µs sample per DMA), then
# pcielab's reads/s and p99 (µs) for windows 1, 4, 5, 6 and 8 (MRRS 4096: one MRd per
# read, as upstream's dma_read). Take medians over the runs: a shared machine moves every
# figure by up to 2x from one second to the next.
set -euo pipefail
up=${1:?usage: $0 UPSTREAM_TLPPERF [RUNS] [SIZES...]}
runs=${2:-5}
if [ $# -gt 2 ]; then sizes=("${@:3}"); else sizes=(64 256 1024); fi
cd "$(dirname "$0")/.."
bin=${PCIELAB_BIN:-target/release/pcielab}
[ -x "$bin" ] || cargo build --release -p pcielab-cli >&2
net="127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))"
adapter="$net.1" local="$net.2"
"$bin" adapter --listen "$adapter" --device "$local" --duration 3600 > /dev/null 2>&1 &
apid=$!
trap 'kill $apid 2>/dev/null || true' EXIT
sleep 0.5
ours() {
  timeout 20 "$bin" tlpperf -r "$adapter" -l "$local" -d read -L "$1" -t 1 --window "$2" \
    --tags $(( $2 * 2 )) --mrrs 4096 -s 1M --format json |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["result"]; print("%d/%.0f" % (r["ops_per_s"], r["p99_us"]))'
}
echo "size_B run up_tps up_p99_us w1 w4 w5 w6 w8 (reads/s/p99_us)"
for len in "${sizes[@]}"; do
  for i in $(seq "$runs"); do
    tps=$(timeout 20 "$up" -r "$adapter" -l "$local" -d read -L "$len" -t 1 -P seq -s 1048576 2>&1 |
      awk '/ tps/{print $2}' | tail -1)
    p99=$(timeout 20 "$up" -r "$adapter" -l "$local" -d read -L "$len" -t 1 -P seq -s 1048576 -M 2>&1 |
      awk '/^latency:/{print $5}' | sort -n | awk '{a[NR]=$1} END{i=int(NR*0.99); if(i<1)i=1; print a[i]}')
    echo "$len $i $tps $p99 $(ours "$len" 1) $(ours "$len" 4) $(ours "$len" 5) $(ours "$len" 6) $(ours "$len" 8)"
  done
done
