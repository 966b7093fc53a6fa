"""What a worker says about its work: where it is connected, a periodic summary, a line per job."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sample_jobs

from ratchet import JobStatus, Ratchet
from ratchet.engine.summary import WorkSummary
from ratchet.sql.store import describe_location
from ratchet.testing import FakeClock


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], clock=clock)
    yield app
    app.close()


def test_the_location_hides_the_password_and_makes_a_sqlite_path_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "postgresql+psycopg://jobs:s3cret@db.internal:5433/app"
    assert describe_location(url) == "postgresql+psycopg://jobs:***@db.internal:5433/app"
    monkeypatch.chdir(tmp_path)
    assert describe_location("sqlite:///jobs.db") == f"sqlite:///{tmp_path / 'jobs.db'}"
    assert os.path.isabs(describe_location("sqlite:///jobs.db").removeprefix("sqlite:///"))


def test_the_start_line_names_the_database(app: Ratchet, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ratchet.worker")
    worker = app.worker(concurrency=2)
    worker.start()
    worker.stop()
    started = [r.getMessage() for r in caplog.records if "started with" in r.getMessage()]
    assert started == [f"worker {worker.node_id} started with 2 slots on {app.store.location}"]


def test_the_summary_counts_what_happened_since_the_last_line(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ratchet.worker")
    worker = app.worker(concurrency=4)
    summary = next(t for t in worker.periodic if isinstance(t, WorkSummary))
    for n in range(3):
        app.enqueue(sample_jobs.record, n).submit()
    app.enqueue(sample_jobs.fail_always, "x").submit()
    app.schedule(timedelta(hours=1), sample_jobs.record, "later").submit()
    worker.run_due()
    caplog.clear()

    summary.run_once(worker)
    [line] = [r for r in caplog.records if r.getMessage().startswith("last 60 s")]
    assert line.levelno == logging.INFO
    assert line.getMessage() == (
        "last 60 s: 3 succeeded, 1 failed, 0 retried, 0 rescheduled; live jobs: 1 PENDING; "
        "slots busy 0/4"
    )
    caplog.clear()
    summary.run_once(worker)  # nothing happened since the last line
    [line] = [r for r in caplog.records if r.getMessage().startswith("last 60 s")]
    assert line.levelno == logging.INFO  # one job waits (scheduled later): still worth a line
    assert "0 succeeded, 0 failed" in line.getMessage()


def test_an_idle_worker_summarises_at_debug_only(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ratchet.worker")
    worker = app.worker(concurrency=1)
    summary = next(t for t in worker.periodic if isinstance(t, WorkSummary))
    summary.run_once(worker)
    [line] = [r for r in caplog.records if r.getMessage().startswith("last 60 s")]
    assert line.levelno == logging.DEBUG
    assert "live jobs: none" in line.getMessage()


def test_each_job_gets_a_debug_line(app: Ratchet, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ratchet.worker")
    ok = app.enqueue(sample_jobs.record, "a").submit()
    bad = app.enqueue(sample_jobs.fail_always, "b").submit()
    app.worker(concurrency=2).run_due()
    lines = {r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG}
    assert f"job {ok.id} attempt 1: SUCCEEDED in 0.000 s" in lines
    assert any(m.startswith(f"job {bad.id} attempt 1: DEAD in 0.000 s (") for m in lines)


def test_a_zero_interval_turns_the_summary_off(app: Ratchet) -> None:
    worker = app.worker(summary_interval=timedelta(0))
    assert not any(isinstance(t, WorkSummary) for t in worker.periodic)


def test_records_name_their_job_only_when_there_is_one(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    from ratchet.engine.context import about_job, install_log_record_factory

    install_log_record_factory()
    caplog.set_level(logging.INFO, logger="ratchet.test")
    log = logging.getLogger("ratchet.test")
    log.info("outside")
    with about_job("job-42"):
        log.info("about a job")
    tags = {r.getMessage(): r.ratchet_job for r in caplog.records}  # type: ignore[attr-defined]
    assert tags == {"outside": "", "about a job": " [job=job-42]"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names in /proc")
def test_a_running_worker_names_its_threads_for_the_operating_system(sqlite_url: str) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    worker = app.worker(concurrency=2)
    worker.start()
    try:
        handle = app.enqueue(sample_jobs.noop).submit()
        assert handle.wait(timeout=30) is JobStatus.SUCCEEDED
        names = {(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()}
    finally:
        worker.stop()
        app.close()
    assert {"ratchet-poller", "ratchet-writer", "ratchet-job-0", "ratchet-watchdo"} <= names
