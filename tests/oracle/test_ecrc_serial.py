"""Independent ECRC oracle: digests computed here, bit by bit, from the PCIe Base Spec's
description of the ECRC (section 2.7.1), never by pcielab.

  * The CRC is the 32-bit LFSR of polynomial 04C1_1DB7, seeded with all ones; each byte
    of the TLP enters it bit 0 first, in the order the bytes are sent; the remainder is
    complemented, and remainder bit 31 becomes bit 0 of the first digest byte, bit 30 bit
    1, ... bit 0 becomes bit 7 of the fourth byte.
  * It covers the header and the data. Two header bits are *variant* (a switch may change
    them on the way) and enter the CRC as 1 whatever their value: bit 0 of the Type field
    (byte 0, bit 0) and EP (byte 2, bit 6).

The LFSR is checked against the published CRC-32 check value (0xCBF43926 for the ASCII
string "123456789", least significant byte first on the wire) and against zlib's CRC-32,
a second implementation. The TLPs themselves are packed by cocotbext-pcie with TD set (it
packs the header and data but no digest); the digest computed here is appended, and:

  * `pcielab tlp decode` accepts every such TLP and reports the same digest;
  * `pcielab tlp encode` of the decoded fields produces the same bytes, digest included;
  * the same TLP with one digest bit flipped is rejected with "ECRC mismatch";
  * TLPs differing only in a variant bit (EP, CfgRd0/CfgRd1, MRd/MRdLk) have one digest.
"""

import json
import os
import random
import subprocess
import zlib

# A hard import: CI installs cocotbext-pcie, and a missing oracle must fail, not skip.
from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpType
from cocotbext.pcie.core.utils import PcieId

N = int(os.environ.get("ORACLE_CASES", "600"))
EXE = os.environ["PCIELAB_BIN"]


def crc32_serial(data: bytes) -> bytes:
    """The spec's LFSR, one bit at a time; returns the four digest bytes in wire order."""
    lfsr = 0xFFFFFFFF
    for byte in data:
        for bit in range(8):
            feedback = ((byte >> bit) & 1) ^ (lfsr >> 31)
            lfsr = (lfsr << 1) & 0xFFFFFFFF
            if feedback:
                lfsr ^= 0x04C11DB7
    rem = lfsr ^ 0xFFFFFFFF
    out = bytearray(4)
    for i in range(4):
        for j in range(8):
            out[i] |= ((rem >> (31 - 8 * i - j)) & 1) << j
    return bytes(out)


def ecrc(tlp_without_digest: bytes) -> bytes:
    """The ECRC of a TLP (no prefixes): the variant bits taken as 1."""
    b = bytearray(tlp_without_digest)
    b[0] |= 0x01  # Type bit 0
    b[2] |= 0x40  # EP
    return crc32_serial(bytes(b))


def test_lfsr_matches_the_published_check_value_and_zlib():
    assert crc32_serial(b"123456789") == bytes.fromhex("2639f4cb")  # 0xCBF43926, LSB first
    rng = random.Random(7)
    for n in range(200):
        data = rng.randbytes(n)
        assert crc32_serial(data) == zlib.crc32(data).to_bytes(4, "little"), n


KINDS = [
    (TlpType.MEM_READ, 0),
    (TlpType.MEM_READ_64, 0),
    (TlpType.MEM_READ_LOCKED, 0),
    (TlpType.MEM_WRITE, 1),
    (TlpType.MEM_WRITE_64, 1),
    (TlpType.IO_READ, 0),
    (TlpType.IO_WRITE, 1),
    (TlpType.CFG_READ_0, 0),
    (TlpType.CFG_WRITE_1, 1),
    (TlpType.CPL, 0),
    (TlpType.CPL_DATA, 1),
    (TlpType.FETCH_ADD_64, 1),
]


def random_tlp(rng: random.Random) -> bytes:
    """A TLP packed by cocotbext-pcie with TD set (header and data, no digest)."""
    ft, has_data = rng.choice(KINDS)
    t = Tlp()
    t.fmt_type = ft
    t.td = True
    t.ep = rng.random() < 0.3
    t.tag = rng.randrange(256)
    t.requester_id = PcieId.from_int(rng.randrange(65536))
    t.completer_id = PcieId.from_int(rng.randrange(65536))
    mem = ft in (TlpType.MEM_READ, TlpType.MEM_READ_64, TlpType.MEM_READ_LOCKED, TlpType.MEM_WRITE)
    mem = mem or ft in (TlpType.MEM_WRITE_64, TlpType.FETCH_ADD_64)
    io_cfg = ft in (TlpType.IO_READ, TlpType.IO_WRITE, TlpType.CFG_READ_0, TlpType.CFG_WRITE_1)
    if ft == TlpType.FETCH_ADD_64:
        ndw = rng.choice([1, 2])
    elif io_cfg:
        ndw = 1
    else:
        ndw = rng.choice([1, 2, 3, 16, rng.randrange(1, 129)])
    if has_data:
        t.data = bytearray(rng.randbytes(ndw * 4))
    t.length = 0 if ft == TlpType.CPL else ndw
    if mem:
        t.tc = rng.randrange(8)
        t.first_be = 0xF
        t.last_be = 0xF if ndw > 1 else 0
        four = ft in (TlpType.MEM_READ_64, TlpType.MEM_WRITE_64, TlpType.FETCH_ADD_64)
        t.address = ((rng.randrange(1 << 32, 1 << 64) if four else rng.randrange(1 << 31)) & ~7) & ~0xFFF
    elif io_cfg:
        t.first_be = 0xF
        t.address = rng.randrange(1 << 10) << 2 if ft in (TlpType.CFG_READ_0, TlpType.CFG_WRITE_1) else 0x1000
    else:
        t.tc = rng.randrange(8)
        t.status = CplStatus.SC if ft == TlpType.CPL_DATA else CplStatus(rng.choice([1, 2, 4]))
        t.byte_count = ndw * 4
        t.lower_address = 0
    return bytes(t.pack())


def pcielab(args, lines):
    out = subprocess.run(
        [EXE, *args, "--file", "-"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    return out


def test_pcielab_agrees_with_the_serial_ecrc():
    rng = random.Random(20261127)
    tlps = [random_tlp(rng) for _ in range(N)]
    for t in tlps:
        assert t[2] & 0x80, "cocotbext set TD"
    full = [t + ecrc(t) for t in tlps]
    dec = pcielab(["tlp", "decode", "--json"], [f.hex() for f in full])
    assert dec.returncode == 0, dec.stderr
    objs = [json.loads(line) for line in dec.stdout.splitlines()]
    assert len(objs) == N
    for f, o in zip(full, objs, strict=True):
        assert o["td"] is True, o
        assert bytes.fromhex(o["ecrc"]) == f[-4:], (f.hex(), o)
    enc = pcielab(["tlp", "encode"], [json.dumps(o) for o in objs])
    assert enc.returncode == 0, enc.stderr
    assert enc.stdout.split() == [f.hex() for f in full]


def test_a_wrong_digest_is_rejected():
    rng = random.Random(5)
    for _ in range(40):
        t = random_tlp(rng)
        good = t + ecrc(t)
        bit = rng.randrange(32)
        bad = bytearray(good)
        bad[-4 + bit // 8] ^= 1 << (bit % 8)
        ok = subprocess.run([EXE, "tlp", "decode", "--hex", good.hex()], capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr
        out = subprocess.run(
            [EXE, "tlp", "decode", "--hex", bytes(bad).hex()], capture_output=True, text=True
        )
        assert out.returncode == 2, (bad.hex(), out.stdout)
        assert f"ECRC mismatch at byte {len(t)}" in out.stderr, out.stderr


def test_variant_bits_do_not_change_the_digest():
    # Pairs that differ only in a variant bit: EP (byte 2 bit 6), and Type bit 0
    # (CfgRd0 00100 / CfgRd1 00101, MRd 00000 / MRdLk 00001). Built by hand.
    mwr = bytes.fromhex("4000800101000f0f00001000deadbeef")
    mwr_ep = bytes.fromhex("4000c00101000f0f00001000deadbeef")
    cfg0 = bytes.fromhex("0400800100000a0f01000010")
    cfg1 = bytes.fromhex("0500800100000a0f01000010")
    mrd = bytes.fromhex("0000800402000b0f00002000")
    mrdlk = bytes.fromhex("0100800402000b0f00002000")
    non_variant = bytes.fromhex("0000800402000b0f00002004")  # address differs
    for a, b in [(mwr, mwr_ep), (cfg0, cfg1), (mrd, mrdlk)]:
        assert ecrc(a) == ecrc(b)
        # Taking the variant bits as they are would give different digests.
        assert crc32_serial(a) != crc32_serial(b)
    assert ecrc(mrd) != ecrc(non_variant)
    lines = [(t + ecrc(t)).hex() for t in (mwr, mwr_ep, cfg0, cfg1, mrd, mrdlk)]
    dec = pcielab(["tlp", "decode", "--json"], lines)
    assert dec.returncode == 0, dec.stderr
    kinds = [json.loads(line)["kind"] for line in dec.stdout.splitlines()]
    assert kinds == ["MWr", "MWr", "CfgRd0", "CfgRd1", "MRd", "MRdLk"], kinds
