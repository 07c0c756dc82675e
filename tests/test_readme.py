"""Runs every `$ pcielab …` command of the README's console blocks and checks that the
output printed below it is what the tool prints now (so the README cannot drift), and the
exit status: 2 for an example whose output is an error (`pcielab: …`), 0 otherwise.

Matching the tool's own output only shows the README is current. The numbers the README
quotes are also checked against sources that are not pcielab: the NIC rows against the
values the published pcie-bench model printed (crates/model/tests/it/pcie_bench_ref.csv)
and the Ethernet arithmetic done here; the MMIO read latencies against a sum worked out by
hand from the link parameters; the enumeration's Unsupported Requests against a count from
the topology."""

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pcielab_bin():
    # Set by the root conftest.py: PCIELAB_BIN, or a fresh debug build.
    return os.environ["PCIELAB_BIN"]


def examples():
    text = (ROOT / "README.md").read_text()
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        cmd, out = None, []
        for line in block.splitlines():
            if line.startswith("$ "):
                if cmd:
                    yield cmd, out
                cmd, out = line[2:], []
            else:
                out.append(line)
        if cmd:
            yield cmd, out


CASES = list(examples())


def test_readme_has_examples():
    assert len(CASES) >= 4


@pytest.mark.parametrize("cmd,expected", CASES, ids=[c for c, _ in CASES])
def test_readme_example(cmd, expected, tmp_path):
    args = shlex.split(cmd)
    assert args[0] == "pcielab"
    # Paths into the repository are resolved from its root; outputs go to a scratch dir.
    args = [str(ROOT / a) if a.startswith("examples/") else a for a in args]
    res = subprocess.run(
        [pcielab_bin(), *args[1:]], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    got = (res.stdout + res.stderr).splitlines()
    assert got == expected, f"{cmd}\nexit {res.returncode}\n" + "\n".join(got)
    want_rc = 2 if expected and expected[0].startswith("pcielab:") else 0
    assert res.returncode == want_rc, f"{cmd}: exit {res.returncode}, expected {want_rc}"


def readme_output(prefix):
    """The output the README shows for its one command starting with `prefix`."""
    found = [out for cmd, out in CASES if cmd.startswith(prefix)]
    assert len(found) == 1, prefix
    return found[0]


def table(lines, first_column):
    """The rows of a whitespace-separated table whose header starts with `first_column`."""
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == [first_column])
    head = lines[at].split()
    rows = []
    for line in lines[at + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(head, line.split(), strict=True)))
    return rows


def published(kind):
    """Lines of the published pcie-bench model's values, split at commas."""
    ref = ROOT / "crates/model/tests/it/pcie_bench_ref.csv"
    return [ln.split(",") for ln in ref.read_text().splitlines() if ln.startswith(kind + ",")]


def test_readme_nic_rows_match_the_published_model_and_ethernet_arithmetic():
    out = readme_output("pcielab model nic --nic batched --dpdk --eth 100")
    # Gen3 x8: 8 GT/s × 8 lanes × 128/130; the TLP-level link rate for MPS 256 as the
    # published model prints it.
    link = next(f for f in published("link") if f[1:4] == ["3", "8", "256"])
    head = out[0]
    assert f"raw {8 * 8 * 128 / 130:.3f} Gb/s" in head, head
    assert f"link {float(link[5]):.3f} Gb/s" in head, head
    rows = table(out, "size_B")
    assert [r["size_B"] for r in rows] == ["64", "791", "1518"]
    ref = {int(f[2]): f for f in published("nic") if f[1] == "dpdk"}
    checked = 0
    for r in rows:
        frame = int(r["size_B"])
        pkt = frame - 4  # the NIC strips the FCS
        # The published model's Ethernet: a VLAN-tagged 18-byte header, at least 42 bytes
        # of payload, FCS, preamble/SFD 8 and inter-frame gap 12 around `pkt`.
        wire = 8 + 18 + max(pkt - 22, 42) + 4 + 12
        mpps = 100e3 / (wire * 8)
        assert r["eth_mpps"] == f"{mpps:.3f}", r
        assert r["eth_gbps"] == f"{mpps * pkt * 8 / 1e3:.3f}", r
        for d in ("tx", "rx", "bidir"):
            # Packets/s = Gb/s ÷ bits a packet; the Gb/s shown is rounded to 0.0005.
            want = float(r[f"{d}_gbps"]) * 1e3 / (pkt * 8)
            tol = 0.0005 + 0.0005 * 1e3 / (pkt * 8) + 1e-9
            assert abs(float(r[f"{d}_mpps"]) - want) <= tol, (d, r)
        if frame in ref:
            # bidir, tx_only, rx_only as pcie-bench printed them (PCIe-bound, so the same at
            # 40 GbE, the rate the reference was computed at).
            f = ref[frame]
            assert r["bidir_gbps"] == f"{float(f[4]):.3f}", (r, f)
            assert r["tx_gbps"] == f"{float(f[5]):.3f}", (r, f)
            assert r["rx_gbps"] == f"{float(f[6]):.3f}", (r, f)
            checked += 1
    assert checked == 2  # 64 and 1518; pcie-bench's table has no 791


def byte_ps(gen, lanes):
    """Picoseconds one byte takes on a link, SKP ordered sets included: Gen1/2 8b/10b
    (10 bits a byte, 4 SKP symbols every 1538), Gen3+ 128b/130b (one SKP block per 375)."""
    if gen <= 2:
        ui = {1: 400, 2: 200}[gen]
        return 10 * ui / lanes * 1538 / 1534
    ui = {3: 125, 4: 62.5, 5: 31.25}[gen]
    return 8 * ui * 130 / 128 / lanes * 376 / 375


def test_readme_mmio_latencies_are_the_hand_computed_sum():
    # The default topology (examples/topologies/sim-default.toml): rc.0 ─ Gen3 x8 ─ sw0,
    # whose ports lead to mem0 (Gen3 x8), mem1 (Gen3 x4) and mem2 (Gen2 x4); mem3 on rc.1
    # by Gen4 x16. Root complex 100 ns each way and switch 150 ns, as the header line
    # says; no propagation delay and no endpoint latency by default. A 4-byte MRd to a BAR
    # above 4 GiB is a 16-byte header + 8 bytes of framing (STP/END or STP token,
    # sequence number, LCRC) = 24 bytes; its CplD 12 + 4 + 8 = 24 bytes.
    out = readme_output("pcielab sim --workload mmio-lat")
    assert "switch 150 ns, root complex 100 ns" in out[0]
    paths = {
        "mem0": [(3, 8), (3, 8)],
        "mem1": [(3, 8), (3, 4)],
        "mem2": [(3, 8), (2, 4)],
        "mem3": [(4, 16)],
    }
    rows = table(out, "device")
    assert sorted(r["device"] for r in rows) == sorted(paths)
    for r in rows:
        links = paths[r["device"]]
        switches = len(links) - 1
        ns = 2 * 100 + 2 * 150 * switches + sum(2 * 24 * byte_ps(g, w) for g, w in links) / 1000
        for col in ("mean_ns", "min_ns", "max_ns"):
            assert abs(float(r[col]) - ns) <= 0.05 + 1e-9, (r, ns)


def test_readme_enumeration_counts_follow_from_the_topology():
    # Host software reads the Vendor ID of device 0..31, function 0, on every bus it finds;
    # an absent device answers Unsupported Request. Buses: 0 (host bridge, two root
    # ports), 1 (the switch's upstream port), 2 (its three downstream ports), 3–5 (mem0,
    # mem1, mem2), 6 (mem3). None of the functions is multi-function.
    devices_per_bus = [3, 1, 3, 1, 1, 1, 1]
    out = readme_output("pcielab sim --workload enumerate")
    rows = [line for line in out if line[:2].isdigit() and ":" in line[:3]]
    assert len(rows) == sum(devices_per_bus) == 11
    last = out[-1]
    assert last.startswith("11 functions;"), last
    ur = sum(32 - n for n in devices_per_bus)
    assert f"({ur} Unsupported Request, 0 timeouts)" in last, (ur, last)
    reads = int(last.split("; ")[1].split()[0])
    assert reads >= 32 * len(devices_per_bus), reads  # every probe is a read
