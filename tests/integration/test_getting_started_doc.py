"""docs/getting-started.md on SQLite: the module, the worker command, submit.py and the
inspection commands run as written and print what the page shows."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def ratchet(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ratchet.cli", *shlex.split(line)[1:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def test_the_sqlite_walkthrough_runs_as_written(tmp_path: Path) -> None:
    module = next(b for b in blocks("python") if b.startswith("# file: myapp/jobs.py"))
    submit = next(b for b in blocks("python") if b.startswith("# file: submit.py"))
    consoles = blocks("console")
    worker_line = next(
        line[2:] for b in consoles for line in b.splitlines() if line.startswith("$ ratchet worker")
    )
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(module)
    (tmp_path / "submit.py").write_text(submit)

    worker = subprocess.Popen(
        [sys.executable, "-m", "ratchet.cli", *shlex.split(worker_line)[1:]],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        done = subprocess.run(
            [sys.executable, "submit.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120
        )
        assert done.returncode == 0, done.stderr
        expected = next(b for b in consoles if b.startswith("$ python submit.py"))
        assert done.stdout == expected.split("\n", 1)[1]
    finally:
        worker.send_signal(signal.SIGINT)
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    assert "attempt 1: welcoming 42" in output
    assert "Traceback" not in output

    inspect = next(b for b in consoles if b.startswith("$ ratchet jobs list"))
    commands = [line[2:] for line in inspect.splitlines() if line.startswith("$ ")]
    listed = ratchet(commands[0], tmp_path)
    assert listed.returncode == 0, listed.stderr
    shown_header = inspect.splitlines()[1]
    assert listed.stdout.splitlines()[0] == shown_header
    statuses = sorted(line.split()[1] for line in listed.stdout.splitlines()[1:])
    assert statuses == ["PENDING", "SUCCEEDED"]
    failed = ratchet(commands[1], tmp_path)
    assert (failed.returncode, failed.stdout) == (0, "no jobs match status FAILED\n")
    job_id = next(line.split()[0] for line in listed.stdout.splitlines() if "SUCCEEDED" in line)
    shown = ratchet(commands[2].rsplit(" ", 1)[0] + " " + job_id, tmp_path)
    assert shown.returncode == 0 and re.search(r'^result +"welcomed 42"$', shown.stdout, re.M)
