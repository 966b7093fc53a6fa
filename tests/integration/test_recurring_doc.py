"""docs/recurring.md: the examples of "Recurring masters and the decorator" run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "recurring.md"


def test_the_masters_examples_run(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Recurring masters and the decorator") :]
    module, *snippets = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert module.startswith("# myapp/jobs.py") and len(snippets) >= 3
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(module)
    script = "\n".join(f"exec({snippet!r}, {{}})" for snippet in snippets)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "SyncReport(created=('myapp.jobs.health_check', 'myapp.jobs.nightly_cleanup')" in (
        done.stdout
    )
