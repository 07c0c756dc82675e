#!/usr/bin/env bash
# Where the simulated NIC's time goes: instructions per packet sent and received, by
# part of the simulator, counted with callgrind (deterministic, unlike wall time on a
# loaded machine). Runs the NIC bench's longer run (`benches/nic.rs`) for one variant
# twice, with W and W + N packets each way, and prints the difference divided by N,
# per part: set-up, the bench's own start-up and the first W packets cancel out. W
# (1,024, four times the driver's 256-entry rings) lets the rings wrap first, so host
# memory's first touch of the buffers' pages is not counted as a per-packet cost.
#
#   scripts/nic-profile.sh [VARIANT] [N]     VARIANT: simple | batched_linux | batched_dpdk
#                                             (default batched_dpdk), N default 8000
#
# Needs valgrind (callgrind and callgrind_annotate). A function's cost includes what
# the compiler inlined into it; parts are told apart by the function's module path.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-batched_dpdk}
n=${2:-8000}
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null || {
  echo "nic-profile: needs valgrind (callgrind, callgrind_annotate)" >&2
  exit 2
}
cargo bench -p pcielab-fabric --bench nic --no-run 2>/dev/null
bin=$(ls -t target/release/deps/nic-* | grep -v '\.d$' | head -1)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
warm=1024
for k in "$warm" $((warm + n)); do
  NIC_BENCH_ONLY=$variant NIC_BENCH_PACKETS=$k valgrind --tool=callgrind \
    --callgrind-out-file="$dir/cg.$k" "$bin" --bench zzz >/dev/null 2>&1
  callgrind_annotate --threshold=100 --auto=no "$dir/cg.$k" 2>/dev/null |
    grep -E '^ *[0-9,]+ +\(' | grep -v 'PROGRAM TOTALS' |
    sed -E 's/^ *([0-9,]+) +\([ 0-9.]+%\)  [^:]*:([^ ]*).*/\1 \2/' |
    awk '{
      n = $1; gsub(",", "", n); f = $2
      if (f ~ /World>::handle/) c = "event handlers, routing"
      else if (f ~ /pcielab_sim::/) c = "kernel: event queue, dispatch loop"
      else if (f ~ /timed::(link|dll|fc)::/) c = "link layer: wire, DLL, credits"
      else if (f ~ /timed::(dma|slot|pool)::|optable|Engine::release/) c = "DMA engine, TLP pool"
      else if (f ~ /timed::(completer|rc)::|functional::HostMemory/) c = "root complex, host memory"
      else if (f ~ /device::nic|Nic as|device::model::Cx/) c = "NIC device model, device API"
      else if (f ~ /msix|pcielab_config::/) c = "interrupts: MSI-X, config space"
      else if (f ~ /drivers::nic/) c = "driver"
      else if (f ~ /timed::(node|route|packed|tlp|engine)::/) c = "event handlers, routing"
      else if (f ~ /memcpy|memset|memmove|malloc|free|realloc/) c = "libc: copies, allocation"
      else c = "other"
      t[c] += n
    } END { for (c in t) printf "%s\t%d\n", c, t[c] }' >"$dir/parts.$k"
done
echo "nic $variant: instructions per packet sent and received (callgrind, $n packets each way after $warm)"
awk -F'\t' -v n="$n" '
  FNR == NR { base[$1] = $2; next }
  { per[$1] = ($2 - base[$1]) / n; total += per[$1] }
  END { for (c in per) printf "%8.0f  %5.1f %%  %s\n", per[c], 100 * per[c] / total, c }
' "$dir/parts.$warm" "$dir/parts.$((warm + n))" | sort -rn | tee "$dir/out"
awk '{ t += $1 } END { printf "%8.0f  100.0 %%  total\n", t }' "$dir/out"
