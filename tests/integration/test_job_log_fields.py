"""Every log record about a job carries its job id, attempt and node: inside the attempt, and
from the watchdog, the completer, cancellation and fencing outside it (``ratchet_job_id``,
``ratchet_attempt``, ``ratchet_node_id``; the JSON format writes them as keys)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import procs
import pytest
import sample_jobs
import timeout_jobs as tj
from timeout_harness import running_worker, wait_for

from ratchet import Ratchet
from ratchet.engine.context import about_job, install_log_record_factory
from ratchet.logformat import JsonFormatter, worker_formatter


@pytest.fixture
def app(sqlite_url: str) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["timeout_jobs", "sample_jobs"])
    yield app
    app.close()


def about(caplog: pytest.LogCaptureFixture, job_id: object) -> dict[str, tuple[object, ...]]:
    """The records naming ``job_id`` in their message: message -> (job, attempt, node)."""
    return {
        r.getMessage(): (
            getattr(r, "ratchet_job_id", None),
            getattr(r, "ratchet_attempt", None),
            getattr(r, "ratchet_node_id", None),
        )
        for r in caplog.records
        if str(job_id) in r.getMessage()
    }


def test_watchdog_records_carry_the_job_attempt_and_node(
    app: Ratchet, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, logger="ratchet")
    with running_worker(
        app, soft_timeout_percent=20, cancellation_grace=timedelta(milliseconds=300)
    ) as worker:
        handle = (
            app.enqueue(tj.sleep_in_c, str(tmp_path / "log"), 2.0)
            .with_timeout(timedelta(milliseconds=600))
            .submit()
        )
        wait_for(lambda: worker.stats.zombies == 1, 10, "the attempt to become a zombie")
        wait_for(lambda: worker.stats.zombies_active == 0, 10, "the zombie call to return")
    records = about(caplog, handle.id)
    expected = (str(handle.id), 1, worker.node_id)
    phrases = [
        "soft timeout",  # the watchdog's warning
        "cancellation requested",  # its request at deadline - grace
        "timed out",  # the timeout recorded at the deadline
        "is a zombie",  # the zombie check
        "the zombie call returned",  # the executor thread, after its call returned
    ]
    for phrase in phrases:
        found = [fields for message, fields in records.items() if phrase in message]
        assert found, f"no record about the job says {phrase!r}: {list(records)}"
        assert set(found) == {expected}, phrase
    assert set(records.values()) == {expected}, "every record about the job names it"


def test_completer_cancellation_and_fencing_records_carry_the_job(
    app: Ratchet, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG, logger="ratchet")
    log = str(tmp_path / "units.log")
    with running_worker(app) as worker:
        done = app.enqueue(sample_jobs.log_warning, "from the job").submit()
        handle = app.enqueue(tj.units_with_safe_points, log, 1000, 0.02).submit()
        wait_for(lambda: "unit 1 end" in tj.lines(log), 10, "the job to get going")
        assert app.cancel_job(handle.id, interrupt=True)
        wait_for(lambda: worker.stats.fenced_out == 1, 10, "its outcome to be fenced out")
        wait_for(lambda: done.status().is_terminal, 10, "the other job")
    node = worker.node_id
    canceled = about(caplog, handle.id)
    delivered = [f for m, f in canceled.items() if "cancellation request delivered" in m]
    fenced = [f for m, f in canceled.items() if m.startswith("fatal: FencedOut")]
    assert delivered == [(str(handle.id), None, node)], "the request names no attempt"
    assert fenced == [(str(handle.id), 1, node)]
    finished = about(caplog, done.id)
    succeeded = [f for m, f in finished.items() if m.startswith(f"job {done.id} attempt 1: SUCC")]
    assert succeeded == [(str(done.id), 1, node)], "the completer's line about the job"
    [inside] = [r for r in caplog.records if r.name == "sample_jobs"]
    assert (inside.ratchet_job_id, inside.ratchet_attempt, inside.ratchet_node_id) == (  # type: ignore[attr-defined]
        str(done.id),
        1,
        node,
    )


def test_the_json_format_writes_the_fields_as_keys() -> None:
    install_log_record_factory()
    formatter = worker_formatter("json")
    assert isinstance(formatter, JsonFormatter)
    log = logging.getLogger("ratchet.test.json")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        with about_job("job-7", 3, "node-a"):
            log.warning("about %s", "it")
        log.info("about nothing")
        try:
            raise ValueError("bad")
        except ValueError:
            with about_job("job-8"):
                log.exception("failed")
    finally:
        log.removeHandler(handler)
        log.setLevel(logging.NOTSET)
        log.propagate = True
    about_it, nothing, failed = (json.loads(formatter.format(r)) for r in records)
    assert {
        k: about_it[k] for k in ("level", "logger", "message", "job_id", "attempt", "node_id")
    } == {
        "level": "WARNING",
        "logger": "ratchet.test.json",
        "message": "about it",
        "job_id": "job-7",
        "attempt": 3,
        "node_id": "node-a",
    }
    assert (nothing["job_id"], nothing["attempt"], nothing["node_id"]) == (None, None, None)
    assert failed["job_id"] == "job-8" and failed["attempt"] is None
    assert failed["exception"].startswith("Traceback") and "ValueError: bad" in failed["exception"]
    assert about_it["time"].endswith("+00:00")
    with pytest.raises(ValueError, match="unknown log format 'xml': use one of text, json"):
        worker_formatter("xml")


def test_a_worker_process_logs_json_lines_with_the_job_fields(
    sqlite_url: str, tmp_path: Path
) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    try:
        handle = app.enqueue(sample_jobs.log_warning, "hello from the job").submit()
        log = tmp_path / "worker.log"
        worker = procs.start_worker(sqlite_url, "--log-format", "json", log=log)
        try:
            assert procs.wait_for(lambda: handle.status().is_terminal, 60), log.read_text()
        finally:
            [code] = procs.stop([worker])
        assert code == 0, log.read_text()
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        [node] = {n.node_id for n in app.attempts(handle.id)}
    finally:
        app.close()
    [inside] = [line for line in lines if line["message"] == "hello from the job"]
    assert (inside["logger"], inside["level"]) == ("sample_jobs", "WARNING")
    assert (inside["job_id"], inside["attempt"], inside["node_id"]) == (str(handle.id), 1, node)


def test_the_worker_refuses_an_unknown_log_format(sqlite_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ratchet.cli", "worker", "sample_app:app", "--log-format", "xml"],
        capture_output=True,
        text=True,
        timeout=60,
        env=procs.worker_env(sqlite_url),
        cwd=str(procs.SUPPORT),
    )
    assert done.returncode == 2
    assert "Invalid value for '--log-format'" in done.stderr
