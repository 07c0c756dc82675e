#!/usr/bin/env python3
"""Writes the capture seeds in fuzz/seeds/pcap/ without pcielab's code: every byte of the
pcap and pcapng containers, the Ethernet/IPv4/UDP frames (IPv4 header checksum
included), the NetTLP headers, TLPs and the DLLP (its 16-bit CRC computed bit by bit from
the spec's description) is put together here with `struct`.

    python3 scripts/pcap_seeds.py --write   # (re)write the three files
    python3 scripts/pcap_seeds.py --check   # fail if a committed file differs

The files (read by crates/cli/tests/capture.rs, the dissector tests and the fuzz targets):

  * mrd_cpld_ack.pcapng: pcapng with a section comment, two interfaces named like the
    simulator's link directions, picosecond timestamps; an MRd, its CplD and an Ack DLLP.
  * old_ports_be_us.pcap: classic pcap, big-endian, microsecond timestamps, the older
    NetTLP port scheme (0x3000 + tag for requests and completions alike).
  * snapped_vlan_old_ports.pcap: classic pcap, little-endian, snap length 80, 802.1Q
    VLAN tags; a 256-byte MWr cut by the snap length, an MRd, a CplD cut by the snap
    length and a MWr cut on the wire (its frame shorter than its UDP length).
"""

import argparse
import struct
import sys
from pathlib import Path

SEEDS = Path(__file__).resolve().parents[1] / "fuzz/seeds/pcap"

MAC_DST = bytes.fromhex("ffffffffffff")
MAC_SRC = bytes.fromhex("001122334455")
IP_SRC = bytes([192, 168, 10, 1])
IP_DST = bytes([192, 168, 10, 3])


def ipv4_checksum(header: bytes) -> int:
    """RFC 791: the ones' complement of the ones' complement sum of the 16-bit words."""
    s = sum(struct.unpack(f">{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(port: int, payload: bytes, vlan: int | None = None, ip_total: int | None = None) -> bytes:
    """Ethernet (optionally 802.1Q) / IPv4 / UDP to `port` from the same port, checksum 0.

    `ip_total` overrides the IPv4 total length (and the UDP length with it) for a frame
    that claims more than it carries."""
    udp_len = 8 + len(payload) if ip_total is None else ip_total - 20
    total = 20 + udp_len
    ip = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 17, 0, IP_SRC, IP_DST))
    struct.pack_into(">H", ip, 10, ipv4_checksum(bytes(ip)))
    udp = struct.pack(">HHHH", port, port, udp_len, 0)
    eth = MAC_DST + MAC_SRC
    if vlan is not None:
        eth += struct.pack(">HH", 0x8100, vlan)
    return eth + struct.pack(">H", 0x0800) + bytes(ip) + udp + payload


def nettlp(seq: int, tstamp: int, body: bytes) -> bytes:
    """The 6-byte NetTLP header (sequence number, timestamp; big endian) and its TLP/DLLP."""
    return struct.pack(">HI", seq, tstamp) + body


def dllp_crc(dllp4: bytes) -> bytes:
    """The DLLP's 16-bit CRC: polynomial 100B, seed FFFF, each byte bit 0 first; the
    remainder complemented, remainder bit 15 to bit 0 of the first CRC byte, bit 8 to its
    bit 7, bit 7 to bit 0 of the second byte."""
    lfsr = 0xFFFF
    for byte in dllp4:
        for bit in range(8):
            feedback = ((byte >> bit) & 1) ^ (lfsr >> 15)
            lfsr = (lfsr << 1) & 0xFFFF
            if feedback:
                lfsr ^= 0x100B
    rem = lfsr ^ 0xFFFF
    out = bytearray(2)
    for i in range(2):
        for j in range(8):
            out[i] |= ((rem >> (15 - 8 * i - j)) & 1) << j
    return bytes(out)


# TLPs, by hand from the header layouts.
# MRd 3DW, Length 1, requester 01:00.0, tag 5, first BE f, address 0x1000.
MRD = bytes.fromhex("000000010100050f00001000")
# CplD for it: completer 00:00.0, SC, Byte Count 4, requester 01:00.0, tag 5, data 0x12345678.
CPLD = bytes.fromhex("4a0000010000000401000500") + struct.pack("<I", 0x12345678)
# Ack DLLP of sequence number 0x029.
ACK4 = bytes.fromhex("00000029")


def pcapng() -> bytes:
    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        n = 12 + len(body)
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    def option(code: int, value: bytes) -> bytes:
        return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)

    end = struct.pack("<HH", 0, 0)
    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + option(1, b"seed") + end)

    def idb(name: bytes) -> bytes:
        # Ethernet, snap length 0 (none), if_name, if_tsresol 12 (picoseconds).
        return block(1, struct.pack("<HHI", 1, 0, 0) + option(2, name) + option(9, bytes([12])) + end)

    def epb(iface: int, ts_ps: int, data: bytes) -> bytes:
        head = struct.pack("<IIIII", iface, ts_ps >> 32, ts_ps & 0xFFFFFFFF, len(data), len(data))
        return block(6, head + data)

    # The device's MRd goes up (interface 1, ep0->rc.0); the CplD and an Ack come down.
    frames = [
        (1, 1000, frame(0x4005, nettlp(0, 0, MRD))),
        (0, 250_000, frame(0x3005, nettlp(0, 0x27, CPLD))),
        (0, 300_000, frame(0x5D11, nettlp(1, 0x2E, ACK4 + dllp_crc(ACK4)))),
    ]
    out = shb + idb(b"rc.0->ep0") + idb(b"ep0->rc.0")
    for iface, ts, f in frames:
        out += epb(iface, ts, f)
    return out


def pcap(big_endian: bool, snaplen: int, packets) -> bytes:
    e = ">" if big_endian else "<"
    out = struct.pack(e + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)
    for sec, usec, data, orig in packets:
        cap = data[:snaplen]
        out += struct.pack(e + "IIII", sec, usec, len(cap), orig) + cap
    return out


def old_ports() -> bytes:
    # MRd to 0x3005 (tag 5), its CplD back on the same port, and a NetTLP header with no
    # TLP after it on port 0x4001.
    mrd = frame(0x3005, nettlp(7, 0x7B, MRD))
    cpld = frame(0x3005, nettlp(8, 0x82, CPLD))
    short = frame(0x4001, nettlp(0x10, 0, b""))
    packets = [(1582000000, us, f, len(f)) for us, f in ((5, mrd), (9, cpld), (12, short))]
    return pcap(True, 0xFFFF, packets)


def snapped() -> bytes:
    # MWr 3DW, TC0, Relaxed Ordering, Length 64 DW (256 bytes), requester 19:00.0, tag 0,
    # BE ff, address 0xa0000000, data 00 01 02 ...: cut at the snap length of 80.
    mwr = bytes.fromhex("40002040190000ffa0000000") + bytes(range(256))
    # MRd 3DW, Length 16 DW, requester 19:00.0, tag 3, BE ff, address 0x90000000.
    mrd = bytes.fromhex("00000010190003ff90000000")
    # CplD, Length 16 DW, completer 1b:00.0, Byte Count 64, requester 19:00.0, tag 3.
    cpld = bytes.fromhex("4a0000101b00004019000300") + bytes(64)
    vlan = 100
    packets = []
    f1 = frame(0x3000, nettlp(1, 0x0A, mwr), vlan)
    packets.append((1563714315, 1, f1, len(f1)))
    f2 = frame(0x3003, nettlp(2, 0x14, mrd), vlan)
    packets.append((1563714315, 2, f2, len(f2)))
    f3 = frame(0x3003, nettlp(3, 0x1E, cpld), vlan)
    packets.append((1563714315, 5, f3, len(f3)))
    # The same MWr as the first, cut on the wire: 132 bytes captured of a frame whose IPv4
    # and UDP lengths claim the whole TLP.
    f4 = frame(0x3000, nettlp(4, 0x28, mwr), vlan)[:132]
    packets.append((1563714315, 9, f4, 132))
    return pcap(False, 80, packets)


FILES = {
    "mrd_cpld_ack.pcapng": pcapng,
    "old_ports_be_us.pcap": old_ports,
    "snapped_vlan_old_ports.pcap": snapped,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write the files")
    ap.add_argument("--check", action="store_true", help="fail if a committed file differs")
    a = ap.parse_args()
    bad = 0
    for name, make in FILES.items():
        data = make()
        path = SEEDS / name
        if a.write:
            path.write_bytes(data)
        elif path.read_bytes() != data:
            print(f"{path}: differs from what {Path(__file__).name} writes", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
