"""Runs every `$ pcielab …` command of the README's console blocks and checks that the
output printed below it is what the tool prints now (so the README cannot drift)."""

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
