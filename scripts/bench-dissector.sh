#!/usr/bin/env bash
# Speed of dissector/pcielab.lua against tshark's own: a simulation capture of about
# 108,000 frames (DMA reads and writes with completions, Acks and UpdateFCs), read by a
# plain `tshark -r` with and without the dissector, each RUNS times (default 3); prints
# the least user CPU time of each and their ratio. A benchmark, not a test: run it on a
# quiet machine.
#   scripts/bench-dissector.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
bin="${PCIELAB_BIN:-target/release/pcielab}"
[ -x "$bin" ] || cargo build -q --release -p pcielab-cli
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cap="$dir/bench.pcapng"
"$bin" sim --workload dma --op rw --size 1000 --count 8400 --pcap "$cap" >/dev/null 2>"$dir/sim.txt"
frames=$(grep -o 'captured [0-9]*' "$dir/sim.txt" | cut -d' ' -f2)
best() {
  local b=""
  for _ in $(seq "$runs"); do
    /usr/bin/time -f "%U" -o "$dir/t" tshark -n "$@" -r "$cap" >/dev/null 2>/dev/null
    local u
    u=$(tail -1 "$dir/t")
    if [ -z "$b" ] || awk "BEGIN{exit !($u < $b)}"; then b=$u; fi
  done
  echo "$b"
}
base=$(best)
lua=$(best -X "lua_script:dissector/pcielab.lua")
echo "frames: $frames"
echo "tshark alone: $base s user (least of $runs)"
echo "tshark with pcielab.lua: $lua s user (least of $runs)"
awk "BEGIN{printf \"ratio: %.2f\\n\", $lua / $base}"
