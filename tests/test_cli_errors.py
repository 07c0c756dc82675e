"""Bad input to `pcielab tlp|dllp decode|encode`: exit status 2, exactly one line on
standard error that says what is wrong and where, and never a panic."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pcielab(*args, stdin=None):
    exe = os.environ["PCIELAB_BIN"]  # set by the root conftest.py
    return subprocess.run([exe, *args], input=stdin, capture_output=True, text=True, check=False)


BAD = [
    (["tlp", "decode", "--hex", "000"], "odd number of hex digits"),
    (["tlp", "decode", "--hex", "00zz"], "not a hex digit"),
    (["tlp", "decode", "--hex", "0000001001"], "truncated: 3 DW TLP header needs 12 bytes"),
    (["tlp", "decode", "--hex", "e0000000"], "bad Fmt/Type at byte 0: 0xe0"),
    (["tlp", "decode", "--hex", "1b00000100000001000000000000"], "Fmt/Type"),
    (["tlp", "decode", "--hex", "36000000000000000000000000000000"], "bad Fmt/Type at byte 0: 0x36"),
    (["tlp", "decode", "--hex", "000000010000000f0000100000"], "trailing bytes"),
    (["tlp", "decode", "--hex", "0400000200000001010000100000"], "trailing bytes"),
    (["tlp", "decode", "--hex", "040000020000000f01000010"], "bad Length at byte 2"),
    (["tlp", "decode", "--hex", "4000800100000f0f0000004001020304deadbeef"], "ECRC mismatch at byte 16"),
    (["tlp", "decode", "--check", "128", "--hex", "0000000201000fff00000ffc"], "Crosses4KiB"),
    (["tlp", "encode", "--json", "{"], "invalid JSON"),
    (["tlp", "encode", "--json", '{"kind":"MWr","address":"0x10"}'], 'field "payload"'),
    (["tlp", "encode", "--json", '{"kind":"MRx"}'], 'field "kind": unknown kind "MRx"'),
    (["tlp", "encode", "--json", '{"kind":"MRd","address":"0x11"}'], "DW aligned"),
    (["tlp", "encode", "--json", '{"kind":"MRd","address":"0x10","tag":1024}'], 'field "tag"'),
    (["tlp", "encode", "--json", '{"kind":"MRd","address":"0x10","bogus":1}'], '"bogus": not a field of MRd'),
    (["dllp", "decode", "--hex", "0000"], "truncated"),
    (["dllp", "decode", "--hex", "000000290000"], "DLLP CRC mismatch at byte 4"),
    (["dllp", "decode", "--no-crc-check", "--hex", "ff0000000000"], "DLLP Type"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_clear_line(args, needle):
    r = pcielab(*args)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert needle in lines[0], lines[0]
    assert "panicked" not in r.stderr


def test_file_errors_name_the_line():
    r = pcielab("tlp", "decode", "--file", "-", stdin="# header\n0000000101000fff00001000\n\n00\n")
    assert r.returncode == 2
    assert r.stderr.strip() == "pcielab: -:4: truncated: TLP header DW0 needs 4 bytes, only 1 available"
    assert r.stdout.startswith("MRd 3DW 01:00.0")


def test_decode_encode_lossless_over_the_demo_set():
    import json

    lines = pcielab("demo", "--json").stdout.splitlines()
    tlps = [json.loads(x) for x in lines if "fmt" in json.loads(x)]
    dllps = [json.loads(x) for x in lines if "fmt" not in json.loads(x)]
    assert len(tlps) >= 18 and len(dllps) >= 12
    for group, cmd in ((tlps, "tlp"), (dllps, "dllp")):
        for d in group:
            d.pop("what")
        hexes = pcielab(cmd, "encode", "--file", "-", stdin="\n".join(json.dumps(d) for d in group)).stdout
        back = pcielab(cmd, "decode", "--json", "--file", "-", stdin=hexes).stdout.splitlines()
        assert [json.loads(b) for b in back] == group
