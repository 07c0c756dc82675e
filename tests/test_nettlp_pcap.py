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


def _random_net():
    """Loopback addresses of this test's own: (adapter, device)."""
    import random

    x, y = random.randint(1, 254), random.randint(1, 254)
    return f"127.{x}.{y}.10", f"127.{x}.{y}.20"


def test_messaging_and_command_frames_decode_with_pcielab_lua(tmp_path):
    import socket

    adapter_ip, device_ip = _random_net()
    control = f"{adapter_ip}:12286"
    pcap = tmp_path / "msg.pcapng"
    adapter = subprocess.Popen(
        [EXE, "adapter", "--duration", "20", "--listen", adapter_ip, "--device", device_ip]
        + ["--control", control, "--pcap", str(pcap)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((device_ip, 0))
        s.settimeout(0.2)
        replies = {}
        for code in (1, 2, 3):
            for _ in range(50):  # the adapter needs a moment to bind
                s.sendto(code.to_bytes(4, "little"), (adapter_ip, 0x2FFF))
                try:
                    replies[code] = s.recv(512)
                    break
                except TimeoutError:
                    continue
        assert sorted(len(r) for r in replies.values()) == [2, 8, 192], replies
        s.sendto(bytes([0x10, 0x00, 0, 0, 0, 0]), (adapter_ip, 0x5002))
        assert s.recv(64) == bytes([0x10, 0x00, 0x67, 0x45, 0x23, 0x01])
    finally:
        subprocess.run([EXE, "adapter", "stop", "--control", control], capture_output=True, check=False)
        adapter.wait(timeout=10)
    lua = ROOT / "dissector" / "pcielab.lua"
    out = subprocess.run(
        ["tshark", "-n", "-X", f"lua_script:{lua}", "-r", str(pcap), "-T", "fields"]
        + ["-e", "udp.srcport", "-e", "udp.dstport", "-e", "_ws.col.Info"]
        + ["-e", "pcielab.nettlp.msg.request", "-e", "pcielab.nettlp.msg.bar4"]
        + ["-e", "pcielab.nettlp.msg.devid", "-e", "pcielab.nettlp.msg.msix_data"]
        + ["-e", "pcielab.nettlp.cmd.reg", "-e", "pcielab.nettlp.cmd.value"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [r.split("\t") for r in out.stdout.strip().splitlines()]
    info = [r[2] for r in rows]
    assert any(i == "NetTLP messaging request GET_BAR4_ADDR" for i in info), info
    assert any(i == "NetTLP messaging request GET_MSIX_TABLE" for i in info), info
    assert any(i == "NetTLP messaging reply BAR4 0x0000000200000000" for i in info), info
    assert any(i == "NetTLP messaging reply device ID 1b:00" for i in info), info
    assert any(i == "NetTLP messaging reply MSI-X table (16 entries)" for i in info), info
    assert any(i == "NetTLP command REG_READ MAGIC 0x01234567" for i in info), info
    # Replies come from the API port, as on the wire.
    bar4 = [r for r in rows if r[4]]
    assert bar4 and bar4[0][0] == str(0x2FFF) and bar4[0][4] == "0x0000000200000000", bar4
    msix = [r for r in rows if r[6]]
    # Default table: vector i has data 0x4020 + i.
    assert msix[0][6].split(",")[:2] == ["0x00004020", "0x00004021"], msix
    cmd = [r for r in rows if r[8] == "0x01234567"]
    assert cmd and cmd[0][0] == str(0x5002), rows
