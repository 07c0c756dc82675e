"""The capture seeds in fuzz/seeds/pcap/ are exactly what scripts/pcap_seeds.py writes
(packed there by hand, independently of pcielab-capture), so they can be regenerated and
reviewed from source."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_committed_seeds_equal_the_script_output():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/pcap_seeds.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
