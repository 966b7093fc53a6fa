"""``RatchetConfig`` and the app constructor: a bare string of allowed modules is one prefix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ratchet import ConfigurationError, Ratchet
from ratchet.config import RatchetConfig


def test_a_bare_string_is_one_prefix() -> None:
    assert RatchetConfig(allowed_modules="myapp").allowed_modules == ("myapp",)  # type: ignore[arg-type]
    assert RatchetConfig(allowed_modules=["a", "b"]).allowed_modules == ("a", "b")  # type: ignore[arg-type]


def test_a_prefix_must_be_a_string() -> None:
    with pytest.raises(ConfigurationError, match="module prefixes"):
        RatchetConfig(allowed_modules=(b"myapp",))  # type: ignore[arg-type]


def test_the_constructor_takes_a_bare_string(sqlite_url: str) -> None:
    with Ratchet(sqlite_url, allowed_modules="ratchet.demo") as app:
        assert app.config.allowed_modules == ("ratchet.demo",)
        assert app.class_policy.is_allowed("ratchet.demo", "greet")
        assert not app.class_policy.is_allowed("r", "x")


def test_a_cli_app_with_a_bare_string_runs_its_jobs(tmp_path: Path) -> None:
    (tmp_path / "bare_app.py").write_text(
        "from ratchet import Ratchet\n"
        "from ratchet.demo import greet\n"
        f"app = Ratchet('sqlite:///{tmp_path / 'jobs.db'}', allowed_modules='ratchet.demo')\n"
        "app.enqueue(greet, 'bare').submit()\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "ratchet.cli", "jobs", "list", "--app", "bare_app:app"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "ratchet.demo:greet" in done.stdout
