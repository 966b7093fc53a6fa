"""The examples in the scheduling, keys-and-gates docs run as written.

In each document, a ```python block whose first line is ``# file: NAME`` is a module the reader
saves; every other ```python block is part of one script, run in a fresh interpreter in the
directory holding those modules.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE = re.compile(r"\A# file: (\S+)\n")
DOCUMENTS = [
    "scheduling.md",
    "deduplication.md",
    "priorities.md",
    "resource-limits.md",
    "circuit-breakers.md",
    "security.md",
]


def split(doc: Path) -> tuple[dict[str, str], str]:
    files: dict[str, str] = {}
    script: list[str] = []
    for block in BLOCK.findall(doc.read_text(encoding="utf-8")):
        match = FILE.match(block)
        if match:
            files[match.group(1)] = block[match.end() :]
        else:
            script.append(block)
    return files, "\n".join(script)


@pytest.mark.parametrize("name", DOCUMENTS)
def test_document_examples_run(name: str, tmp_path: Path) -> None:
    files, script = split(DOCS / name)
    assert script.strip(), f"{name} has no runnable example"
    for rel, body in files.items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
    (tmp_path / "example.py").write_text(script, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
