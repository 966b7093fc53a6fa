"""docs/workflows.md: the complete example runs as written and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"


def test_the_complete_example_runs(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## A complete example") :]
    module, script = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert module.startswith("# myapp/jobs.py")
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(module)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # jobs print from several worker threads: lines may interleave, each text is one write
    for expected in (
        "released: 1",
        "published 2026-11-30",
        "audit 2026-11-30",
        "report: two or more payments declined",
        "batch: 10 items, 8 succeeded, 2 failed",
        "order: order-17 APPROVED (stock ok)",
    ):
        assert expected in done.stdout, done.stdout
    assert "receipt for job " in done.stdout, done.stdout
