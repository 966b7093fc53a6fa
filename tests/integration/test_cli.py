"""The ``ratchet`` command: what a new user gets wrong says one line, never a traceback."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ratchet.cli import main


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The working directory of the command, with an importable package of a unique name."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_app adds the working directory
    yield tmp_path


def package(workdir: Path, jobs: str) -> str:
    """Write ``<pkg>/jobs.py`` and return the package name (unique: modules stay imported)."""
    name = f"myapp_{uuid.uuid4().hex[:8]}"
    (workdir / name).mkdir()
    (workdir / name / "__init__.py").write_text("")
    (workdir / name / "jobs.py").write_text(
        jobs.replace("PKG", name).replace("DB", str(workdir / "jobs.db"))
    )
    return name


APP = """
from ratchet import Ratchet

app = Ratchet("sqlite:///DB", allowed_modules=["PKG"])


def send_welcome(user_id: int) -> str:
    return f"welcome {user_id}"


def nightly_cleanup():
    raise AssertionError("a job function must never be called as a factory")


def create_app() -> Ratchet:
    return app


def make_other():
    return 42


def describe() -> str:
    raise AssertionError("never called: its annotation says it returns no app")


NOT_CALLABLE = "text"
"""


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_line_error(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0][len("error: ") :]


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        (
            "send_welcome",
            "PKG.jobs:send_welcome is not a Ratchet app or app factory: it is the function "
            "send_welcome(user_id: int) -> str, which needs arguments; did you mean PKG.jobs:app?",
        ),
        (
            "nightly_cleanup",
            "PKG.jobs:nightly_cleanup is not a Ratchet app or app factory: it is the function "
            "nightly_cleanup(), a job of this module's app; did you mean PKG.jobs:app?",
        ),
        (
            "make_other",
            "PKG.jobs:make_other is not a Ratchet app or app factory: it is the function "
            "make_other(), a job of this module's app; did you mean PKG.jobs:app?",
        ),
        (
            "describe",
            "PKG.jobs:describe is not a Ratchet app or app factory: it is the function "
            "describe() -> str, which does not return an app; did you mean PKG.jobs:app?",
        ),
        (
            "NOT_CALLABLE",
            "PKG.jobs:NOT_CALLABLE is not a Ratchet app or app factory: it is a str; did you "
            "mean PKG.jobs:app?",
        ),
        ("Ratchet", "it is the class Ratchet"),
        ("nope", "module 'PKG.jobs' has no attribute 'nope'; did you mean PKG.jobs:app?"),
    ],
)
def test_what_is_not_an_app_says_what_it_is(workdir: Path, attr: str, message: str) -> None:
    name = package(workdir, APP)
    error = one_line_error(run("jobs", "list", "--app", f"{name}.jobs:{attr}"))
    assert message.replace("PKG", name) in error


def test_an_app_and_a_factory_are_both_accepted(workdir: Path) -> None:
    name = package(workdir, APP)
    for attr in ("app", "create_app"):
        result = run("jobs", "list", "--app", f"{name}.jobs:{attr}")
        assert result.exit_code == 0, result.output


def test_a_factory_returning_something_else(workdir: Path) -> None:
    name = package(workdir, "def make():\n    return 42\n")
    assert one_line_error(run("worker", f"{name}.jobs:make")) == (
        f"{name}.jobs:make is not a Ratchet app or app factory: calling it returned int"
    )


def test_a_module_that_cannot_be_found_hints_at_the_working_directory(workdir: Path) -> None:
    error = one_line_error(run("worker", "nosuch_pkg.jobs:app"))
    assert error == (
        "cannot import 'nosuch_pkg.jobs': No module named 'nosuch_pkg' (modules are looked up "
        f"from the working directory {workdir} and PYTHONPATH: run the command from the "
        "directory that contains 'nosuch_pkg', or add that directory to PYTHONPATH)"
    )


def test_a_missing_submodule_or_dependency_is_named(workdir: Path) -> None:
    name = package(workdir, "import no_such_dependency_xyz\n")
    assert one_line_error(run("worker", f"{name}.other:app")) == (
        f"cannot import '{name}.other': No module named '{name}.other'"
    )
    assert one_line_error(run("worker", f"{name}.jobs:app")) == (
        f"importing '{name}.jobs' failed: No module named 'no_such_dependency_xyz'"
    )


def test_a_spec_without_attribute(workdir: Path) -> None:
    assert one_line_error(run("worker", "myapp.jobs")) == (
        "expected MODULE:APP (e.g. myapp.jobs:app), got 'myapp.jobs'"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["jobs", "list"],
        ["jobs", "show", "01a2323b-222e-71aa-a09e-914cf5371c25"],
        ["jobs", "cancel", "01a2323b-222e-71aa-a09e-914cf5371c25"],
        ["jobs", "retry", "01a2323b-222e-71aa-a09e-914cf5371c25"],
    ],
)
def test_a_sqlite_file_that_does_not_exist_is_not_created(
    workdir: Path, command: list[str]
) -> None:
    error = one_line_error(run(*command, "--url", "sqlite:///nosuch.db"))
    assert error == (
        f"there is no SQLite database at {workdir / 'nosuch.db'} (a relative path is read from "
        "the working directory); check --url, or create it with "
        "`ratchet db upgrade --url sqlite:///nosuch.db`"
    )
    assert not (workdir / "nosuch.db").exists()


def test_db_upgrade_creates_the_file(workdir: Path) -> None:
    result = run("db", "upgrade", "--url", "sqlite:///new.db")
    assert result.exit_code == 0, result.output
    assert (workdir / "new.db").exists()
    assert run("jobs", "list", "--url", "sqlite:///new.db").exit_code == 0


def test_an_unreachable_database_is_one_line() -> None:
    error = one_line_error(
        run("jobs", "list", "--url", "postgresql+psycopg://u:secret@127.0.0.1:9/db")
    )
    assert error.startswith("database unavailable: ") and "secret" not in error
