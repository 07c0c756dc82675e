"""pytest setup for the Python tests: the `pcielab` binary they run.

`PCIELAB_BIN` names it. When it is unset, the current sources are built first
(`cargo build -p pcielab-cli`, a no-op when up to date) and `target/debug/pcielab` is
used, so a test never runs a stale binary; a failed build stops the run with cargo's
error. A `PCIELAB_BIN` that is not an executable file stops the run too.
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def pytest_configure(config):
    exe = os.environ.get("PCIELAB_BIN")
    if exe:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            pytest.exit(f"PCIELAB_BIN={exe} is not an executable file", returncode=2)
        return
    build = subprocess.run(
        ["cargo", "build", "-q", "-p", "pcielab-cli"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if build.returncode != 0:
        pytest.exit(
            "PCIELAB_BIN is unset and `cargo build -p pcielab-cli` failed:\n" + build.stderr, returncode=2
        )
    os.environ["PCIELAB_BIN"] = str(ROOT / "target/debug/pcielab")
