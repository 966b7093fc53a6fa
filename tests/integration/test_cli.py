"""The ``ratchet`` command: what a new user gets wrong says one line, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest
import sample_jobs
from click.testing import CliRunner, Result

from ratchet import JobStatus, Ratchet
from ratchet.cli import main
from ratchet.testing import FakeClock


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


# ------------------------------------------------------------------------- jobs list / show
@pytest.fixture
def jobs_db(sqlite_url: str, clock: FakeClock) -> Iterator[tuple[str, dict[str, UUID]]]:
    """A database with a job that succeeded on its third attempt, one dead-lettered after two,
    and one pending with tags and rich arguments."""
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], clock=clock)
    flaky = app.enqueue(sample_jobs.fail_until, 3).with_max_retries(5).submit()
    dead = app.enqueue(sample_jobs.fail_always, "boom").with_max_retries(1).submit()
    worker = app.worker(concurrency=4)
    for _ in range(3):
        worker.run_due()
    pending = (
        app.schedule(timedelta(minutes=5), sample_jobs.record, {"n": [1, 2]})
        .with_tags("Billing", "eu")
        .with_timeout(timedelta(seconds=90))
        .with_backoff("FIXED", timedelta(milliseconds=1500))
        .submit()
    )
    assert (flaky.status(), dead.status()) == (JobStatus.SUCCEEDED, JobStatus.FAILED)
    app.close()
    yield sqlite_url, {"flaky": flaky.id, "dead": dead.id, "pending": pending.id}


def test_jobs_list_has_a_header_and_readable_columns(
    jobs_db: tuple[str, dict[str, UUID]],
) -> None:
    url, ids = jobs_db
    result = run("jobs", "list", "--url", url)
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["JOB", "ID", "STATUS", "PRIORITY", "ATTEMPTS", "CREATED", "TARGET"]
    by_id = {row.split()[0]: row.split() for row in rows}
    assert by_id[str(ids["flaky"])][1:4] == ["SUCCEEDED", "NORMAL", "3"]
    assert by_id[str(ids["dead"])][1:4] == ["FAILED", "NORMAL", "2"]
    assert by_id[str(ids["pending"])][1:4] == ["PENDING", "NORMAL", "0"]
    assert by_id[str(ids["pending"])][-1] == "sample_jobs:record"
    assert datetime.fromisoformat(by_id[str(ids["pending"])][4]).utcoffset() is not None


def test_jobs_list_says_when_nothing_matches(jobs_db: tuple[str, dict[str, UUID]]) -> None:
    url, _ = jobs_db
    result = run("jobs", "list", "--url", url, "--status", "paused", "--tag", "eu")
    assert (result.exit_code, result.stdout) == (0, "no jobs match status PAUSED and tag 'eu'\n")
    listed = json.loads(run("jobs", "list", "--url", url, "--status", "paused", "--json").stdout)
    assert listed == {"jobs": [], "next_cursor": None}


def test_jobs_show_json_is_plain_json(jobs_db: tuple[str, dict[str, UUID]]) -> None:
    url, ids = jobs_db
    pending = json.loads(run("jobs", "show", "--json", "--url", url, str(ids["pending"])).stdout)
    assert pending["payload"] == {"args": [{"n": [1, 2]}], "kwargs": {}}
    assert pending["tags"] == ["billing", "eu"]
    assert pending["timeout_seconds"] == 90.0
    assert pending["backoff_delay_seconds"] == 1.5
    assert pending["attempts"] == 0 and pending["attempt_history"] == []
    for key in ("created_at", "scheduled_time"):
        assert datetime.fromisoformat(pending[key]).utcoffset() == timedelta(0), key

    flaky = json.loads(run("jobs", "show", "--json", "--url", url, str(ids["flaky"])).stdout)
    assert flaky["result"] == 3  # a JSON value, not JSON inside a string
    assert (flaky["attempts"], flaky["failed_attempts"]) == (3, 2)
    history = flaky["attempt_history"]
    assert [a["attempt"] for a in history] == [1, 2, 3]
    assert [a["outcome"] for a in history] == ["RETRY", "RETRY", "SUCCEEDED"]
    for attempt in history:
        assert datetime.fromisoformat(attempt["started_at"]).utcoffset() == timedelta(0)
        assert isinstance(attempt["duration_seconds"], float)

    dead = json.loads(run("jobs", "show", "--json", "--url", url, str(ids["dead"])).stdout)
    assert (dead["status"], dead["attempts"], len(dead["attempt_history"])) == ("FAILED", 2, 2)
    assert dead["last_error"] == "RuntimeError: boom"


def test_jobs_show_prints_where_a_failed_attempt_raised(
    jobs_db: tuple[str, dict[str, UUID]],
) -> None:
    url, ids = jobs_db
    dead = json.loads(run("jobs", "show", "--json", "--url", url, str(ids["dead"])).stdout)
    for attempt in dead["attempt_history"]:
        assert "in fail_always" in attempt["traceback"]
        assert attempt["traceback"].rstrip().endswith("RuntimeError: boom")
    text = run("jobs", "show", "--url", url, "--traceback", str(ids["dead"]))
    assert text.exit_code == 0, text.output
    first, second, *rest = text.stdout.splitlines()
    assert first.startswith("attempt 2 on ") and first.endswith(": RuntimeError: boom")
    assert second == "Traceback (most recent call last):"
    assert rest[-1] == "RuntimeError: boom"
    pending = run("jobs", "show", "--url", url, "--traceback", str(ids["pending"]))
    assert pending.exit_code == 1
    assert "has no failed attempt with a traceback" in pending.output


def test_jobs_list_json_has_the_fields_of_show(jobs_db: tuple[str, dict[str, UUID]]) -> None:
    url, ids = jobs_db
    listed = json.loads(run("jobs", "list", "--url", url, "--json").stdout)["jobs"]
    shown = json.loads(run("jobs", "show", "--json", "--url", url, str(ids["flaky"])).stdout)
    [flaky] = [doc for doc in listed if doc["id"] == str(ids["flaky"])]
    del shown["attempt_history"], shown["epoch"], shown["logs"]
    assert flaky == shown


def test_the_demo_counts_attempts_as_the_cli_does(tmp_path: Path) -> None:
    from ratchet.demo import run_demo

    db = tmp_path / "demo.db"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run_demo(str(db), quiet_logs=False) == 0
    demo_rows = {line[:20].strip(): line[20:].split()[:2] for line in out.getvalue().splitlines()}
    assert demo_rows["flaky (retried)"] == ["SUCCEEDED", "3"]
    assert demo_rows["broken (DLQ)"] == ["FAILED", "2"]
    listed = json.loads(run("jobs", "list", "--url", f"sqlite:///{db}", "--json").stdout)["jobs"]
    attempts = {doc["target"].split(":")[1]: doc["attempts"] for doc in listed}
    assert (attempts["flaky_charge"], attempts["broken_import"]) == (3, 2)


POOL_APP = """
from ratchet import Ratchet


class App(Ratchet):
    def run_worker(self, config=None, **options):
        pool = self.store.engine.pool
        print("pool", pool.size(), pool.max_overflow)


app = App("URL", allowed_modules=["PKG"])
"""


@pytest.mark.postgres
def test_worker_pool_options_and_variables_size_the_apps_store(
    workdir: Path, postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = package(workdir, POOL_APP.replace("URL", postgres_store_url))
    result = run("worker", f"{name}.jobs:app", "--pool-size", "3", "--max-overflow", "1")
    assert result.exit_code == 0, result.output
    assert "pool 3 1" in result.stdout
    monkeypatch.setenv("RATCHET_MAX_OVERFLOW", "4")
    result = run("worker", f"{name}.jobs:app", "--pool-size", "2")
    assert "pool 2 4" in result.stdout, result.output


FREEZE_APP = """
import gc

from ratchet import Ratchet


class App(Ratchet):
    def run_worker(self, config=None, **options):
        print("frozen", gc.get_freeze_count())


app = App("sqlite:///DB", allowed_modules=["PKG"])
"""


def test_the_worker_command_freezes_the_start_up_heap_before_running(workdir: Path) -> None:
    import gc

    name = package(workdir, FREEZE_APP)
    assert gc.get_freeze_count() == 0
    result = run("worker", f"{name}.jobs:app")  # the conftest unfreezes this process after
    assert result.exit_code == 0, result.output
    frozen = int(result.stdout.split("frozen ")[1].split()[0])
    assert frozen > 10_000, result.stdout  # the imported modules and the app at least


def test_worker_pool_sizes_out_of_range_are_one_line_errors(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run("worker", "x.jobs:app", "--pool-size", "0")
    assert result.exit_code == 2 and "--pool-size" in result.output
    monkeypatch.setenv("RATCHET_MAX_OVERFLOW", "-1")
    assert one_line_error(run("worker", "x.jobs:app")) == (
        "RATCHET_MAX_OVERFLOW: -1 is below 0 (see docs/configuration.md)"
    )
