"""`pcielab dma read --pcap` against `pcielab adapter`, decoded by tshark (an independent
decoder of Ethernet/IPv4/UDP): the frames carry the NetTLP port scheme, valid IPv4
checksums, and the NetTLP header + TLP bytes. Loopback only (127.0.0.1 / 127.0.0.2)."""

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXE = os.environ["PCIELAB_BIN"]  # set by the root conftest.py


def test_dma_read_capture_decodes_in_tshark(tmp_path):
    pcap = tmp_path / "dma.pcap"
    adapter = subprocess.Popen(
        [EXE, "adapter", "--duration", "20", "--control", "127.0.0.1:12286"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        out = None
        for _ in range(100):
            out = subprocess.run(
                [EXE, "dma", "read", "-b", "1b:00", "-a", "0x1ffe", "-s", "8", "--pcap", str(pcap)],
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode == 0:
                break
            time.sleep(0.05)
        assert out is not None and out.returncode == 0, out.stderr
    finally:
        subprocess.run([EXE, "adapter", "stop"], capture_output=True, check=False)
        adapter.wait(timeout=10)
    fields = (
        subprocess.run(
            [
                "tshark",
                "-r",
                str(pcap),
                "-o",
                "ip.check_checksum:TRUE",
                "-T",
                "fields",
                "-e",
                "ip.src",
                "-e",
                "ip.dst",
                "-e",
                "udp.srcport",
                "-e",
                "udp.dstport",
                "-e",
                "ip.checksum.status",
                "-e",
                "udp.length",
                "-e",
                "udp.payload",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()
    )
    rows = [f.split("\t") for f in fields]
    # 8 bytes at 0x1ffe cross 4 KiB: two MRds (0x1ffe: 2 B, 0x2000: 6 B) and two CplDs.
    mrds = [r for r in rows if r[0] == "127.0.0.2"]
    cplds = [r for r in rows if r[0] == "127.0.0.1"]
    assert len(mrds) == 2 and len(cplds) == 2, rows
    for r in rows:
        assert r[4] == "1", f"IPv4 checksum not good: {r}"  # tshark: 0 bad, 1 good, 2 unverified
    # Requests go to 0x3000 + tag; completions come back from the same port.
    assert all(r[2] == r[3] for r in rows), rows  # source port == destination port
    tags = sorted(int(r[3]) - 0x3000 for r in mrds)
    assert all(0 <= t < 256 for t in tags)
    assert sorted(int(r[2]) for r in cplds) == sorted(int(r[3]) for r in mrds)
    # MRd: UDP length 8 + 6 + 12; first TLP byte 0x00 (MRd 3DW) after 6 zero header bytes.
    for r in mrds:
        assert r[5] == "26", r
        assert r[6].startswith("000000000000" + "00"), r
    # CplD with 1 DW (2 bytes at 0x1ffe) and 2 DW (6 bytes at 0x2000): 8+6+12+4 / +8.
    assert sorted(r[5] for r in cplds) == ["30", "34"], cplds
    for r in cplds:
        assert r[6][12:14] == "4a", r  # CplD
