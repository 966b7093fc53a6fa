"""How ``dev.py`` gets uv without writing into the Python that runs it.

The commands ``dev.py`` would run are recorded instead of run. The real thing (Debian's
``/usr/bin/python3 dev.py demo`` with no uv on PATH) is too slow and too machine-specific for
the suite: it downloads uv and needs a Python that refuses ``pip install``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from devscript import load_dev

VENV_PACKAGE = f"python3.{sys.version_info.minor}-venv"


class Recorder:
    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def __call__(self, cmd: list[str], **kwargs: object) -> None:
        self.commands.append(cmd)


@pytest.fixture
def dev(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    module = load_dev()
    monkeypatch.setattr(module, "BOOTSTRAP", tmp_path / ".venv-bootstrap")
    monkeypatch.setattr(module, "run", Recorder())
    monkeypatch.delenv("UV", raising=False)
    monkeypatch.setattr(module.shutil, "which", lambda name: None)
    return module


def test_uv_on_path_is_used_as_it_is(dev: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev.shutil, "which", lambda name: sys.executable)
    assert dev.ensure_uv() == sys.executable
    assert dev.run.commands == []


def test_the_uv_running_us_is_used(dev: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV", sys.executable)
    assert dev.ensure_uv() == sys.executable
    assert dev.run.commands == []


def test_without_uv_it_goes_into_a_private_venv(dev: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev, "has_ensurepip", lambda: True)
    uv = dev.ensure_uv()
    assert uv == str(dev.BOOTSTRAP / "bin" / "uv")
    python = str(dev.BOOTSTRAP / "bin" / "python")
    assert dev.run.commands == [
        [sys.executable, "-m", "venv", str(dev.BOOTSTRAP)],
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "uv"],
    ]


def test_a_private_uv_from_before_is_reused(dev: Any) -> None:
    private = dev.BOOTSTRAP / "bin" / "uv"
    private.parent.mkdir(parents=True)
    private.write_text("")
    assert dev.ensure_uv() == str(private)
    assert dev.run.commands == []


def test_debian_without_venv_support_gets_it_when_root(
    dev: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter([False, True])  # before and after the apt-get install
    monkeypatch.setattr(dev, "has_ensurepip", lambda: next(answers))
    monkeypatch.setattr(dev, "is_debian_python", lambda: True)
    monkeypatch.setattr(dev, "is_root", lambda: True)
    dev.ensure_uv()
    assert dev.run.commands[:3] == [
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", VENV_PACKAGE],
        [sys.executable, "-m", "venv", str(dev.BOOTSTRAP)],
    ]


def test_debian_without_venv_support_says_what_to_install_when_not_root(
    dev: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dev, "has_ensurepip", lambda: False)
    monkeypatch.setattr(dev, "is_debian_python", lambda: True)
    monkeypatch.setattr(dev, "is_root", lambda: False)
    with pytest.raises(SystemExit) as exited:
        dev.ensure_uv()
    assert str(exited.value) == (
        f"dev.py: uv is not on PATH and {sys.executable} cannot create a virtual environment to "
        f"install it into (it has no ensurepip module): install {VENV_PACKAGE} "
        f"(apt-get install {VENV_PACKAGE}) or uv, then run dev.py again"
    )
    assert dev.run.commands == []


def test_the_second_python_is_the_one_named_in_the_environment(
    dev: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_SECOND_PYTHON", "/opt/py312/bin/python3.12")
    assert dev.second_python() == "/opt/py312/bin/python3.12"


def test_without_a_312_found_uv_is_asked_for_one(
    dev: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("RATCHET_SECOND_PYTHON", raising=False)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    assert dev.second_python() == "3.12"


def test_a_pyenv_312_is_found(dev: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RATCHET_SECOND_PYTHON", raising=False)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    python = tmp_path / "versions" / "3.12.9" / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    assert dev.second_python() == str(python)


def test_the_django_6_leg_fails_loudly_without_its_python(
    dev: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(cmd: list[str], **kwargs: object) -> None:
        raise dev.subprocess.CalledProcessError(2, cmd)

    monkeypatch.setenv("RATCHET_SECOND_PYTHON", "3.12")
    monkeypatch.setattr(dev, "run", refuse)
    assert dev.second_leg("uv") == 1
    err = capsys.readouterr().err
    assert "FAILED to build .venv-py312/ on Python 3.12" in err
    assert "uv python install 3.12" in err
