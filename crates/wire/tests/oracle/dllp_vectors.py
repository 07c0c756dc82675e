#!/usr/bin/env python3
"""DLLP test vectors from an independent encoder: cocotbext-pcie (PyPI).

Every vector is built and packed (CRC included) by cocotbext-pcie, never by pcielab.
The Rust test `tests/it/dllp_oracle.rs` checks that pcielab parses each vector to the
fields cocotbext used and emits exactly the same bytes, and that the corrupted ones
fail the CRC check.

    python3 dllp_vectors.py --write   # regenerate dllp_vectors.txt (seeded, deterministic)
    python3 dllp_vectors.py --check   # regenerate in memory, fail if the file differs
    pytest dllp_vectors.py            # the same check as a pytest test

Line format (one vector per line, '#' starts a comment):

    <12 hex digits> <crc_ok 0|1> <DllpType name> seq vc hdr_scale hdr_fc data_scale data_fc
        feature_support feature_ack
"""

import argparse
import pathlib
import random
import sys

from cocotbext.pcie.core.dllp import Dllp, DllpType, FcScale

HERE = pathlib.Path(__file__).resolve().parent
VECTORS = HERE / "dllp_vectors.txt"
SEED = 20261122
COUNT = 2000

FC_TYPES = [
    DllpType.INIT_FC1_P,
    DllpType.INIT_FC1_NP,
    DllpType.INIT_FC1_CPL,
    DllpType.INIT_FC2_P,
    DllpType.INIT_FC2_NP,
    DllpType.INIT_FC2_CPL,
    DllpType.UPDATE_FC_P,
    DllpType.UPDATE_FC_NP,
    DllpType.UPDATE_FC_CPL,
]
SIMPLE_TYPES = [
    DllpType.PM_ENTER_L1,
    DllpType.PM_ENTER_L23,
    DllpType.PM_ACT_ST_REQ_L1,
    DllpType.PM_REQ_ACK,
    DllpType.NOP,
]


def random_dllp(rng):
    d = Dllp()
    pick = rng.randrange(5)
    if pick == 0:
        d = Dllp.create_ack(rng.randrange(4096))
    elif pick == 1:
        d = Dllp.create_nak(rng.randrange(4096))
    elif pick == 2:
        d.type = rng.choice(FC_TYPES)
        d.vc = rng.randrange(8)
        d.hdr_scale = FcScale(rng.randrange(4))
        d.hdr_fc = rng.randrange(256)
        d.data_scale = FcScale(rng.randrange(4))
        d.data_fc = rng.randrange(4096)
    elif pick == 3:
        d.type = rng.choice(SIMPLE_TYPES)
    else:
        d.type = DllpType.DATA_LINK_FEATURE
        d.feature_support = rng.randrange(1 << 23)
        d.feature_ack = bool(rng.randrange(2))
    return d


def line(pkt, crc_ok, d):
    return " ".join(
        [
            pkt.hex(),
            str(int(crc_ok)),
            d.type.name,
            str(d.seq),
            str(d.vc),
            str(int(d.hdr_scale)),
            str(d.hdr_fc),
            str(int(d.data_scale)),
            str(d.data_fc),
            str(d.feature_support),
            str(int(bool(d.feature_ack))),
        ]
    )


def generate():
    rng = random.Random(SEED)
    out = [
        "# DLLP vectors packed by cocotbext-pcie; regenerate with dllp_vectors.py --write",
        f"# seed {SEED}, {COUNT} good vectors, then {COUNT // 4} with one bit flipped",
    ]
    good = []
    for _ in range(COUNT):
        d = random_dllp(rng)
        pkt = d.pack_crc()
        # cocotbext must accept its own packing and give back the same fields.
        assert Dllp.unpack_crc(pkt) == d, (pkt.hex(), d)
        good.append((pkt, d))
        out.append(line(pkt, True, d))
    for pkt, d in good[: COUNT // 4]:
        bad = bytearray(pkt)
        bit = rng.randrange(48)
        bad[bit // 8] ^= 1 << (bit % 8)
        try:
            Dllp.unpack_crc(bytes(bad))
            crc_ok = True
        except Exception as exc:  # cocotbext raises a bare Exception("Invalid CRC")
            if "CRC" not in str(exc):
                raise
            crc_ok = False
        assert not crc_ok, bad.hex()
        out.append(line(bytes(bad), False, d))
    return "\n".join(out) + "\n"


def test_vectors_match_cocotbext():
    """pytest entry point: the committed vectors are exactly what cocotbext-pcie packs."""
    assert VECTORS.read_text() == generate()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="write dllp_vectors.txt")
    g.add_argument("--check", action="store_true", help="compare with dllp_vectors.txt")
    args = ap.parse_args()
    text = generate()
    if args.write:
        VECTORS.write_text(text)
        print(f"wrote {VECTORS.name}: {text.count(chr(10)) - 2} vectors")
        return 0
    if VECTORS.read_text() != text:
        print(f"{VECTORS.name} differs from what cocotbext-pcie generates now", file=sys.stderr)
        return 1
    print(f"{VECTORS.name} matches cocotbext-pcie ({text.count(chr(10)) - 2} vectors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
