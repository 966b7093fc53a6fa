"""Cluster on MariaDB 10.11: ``ratchet worker`` processes share one database; every job runs once.

Workers start first, then the test process submits the jobs in chunks while they claim, so
claims, inserts and completions really overlap. A side-effect table written by each job proves
that every job ran exactly once; the attempt history shows one attempt per job; no worker logs a
deadlock or an error. Deadlocks the store absorbed by retrying (``store.retried_errors``, written
by each worker at exit) and the server's own ``Innodb_deadlocks`` counter are reported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
CHUNK = 500
STOP_TIMEOUT = 60.0


def ratchet_command() -> list[str]:
    script = Path(sys.executable).parent / "ratchet"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ratchet.cli"]


@dataclass
class ClusterResult:
    jobs: int
    workers: int
    seconds: float
    retried: int
    server_deadlocks: int


class Workers:
    """``ratchet worker mysql_jobs:app`` subprocesses with their logs."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.tmp_path = tmp_path
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            "RATCHET_TEST_DB_URL": url,
            "RATCHET_TEST_STATS_DIR": str(tmp_path),
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(self, count: int) -> None:
        command = [*ratchet_command(), "worker", "mysql_jobs:app", "--concurrency", "32"]
        command += ["--batch-size", "50", "--min-delay", "0.01", "--max-delay", "0.1"]
        command += ["--burst-delay", "0.005", "--log-level", "warning"]
        for i in range(count):
            log = self.tmp_path / f"worker-{i}.log"
            with log.open("wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        command, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=HERE
                    )
                )
            self.logs.append(log)

    def dead(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.poll() is not None]

    def output(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in self.logs)

    def stop(self) -> list[int | None]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(STOP_TIMEOUT))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                codes.append(None)
        return codes

    def retried(self) -> int:
        return sum(int(p.read_text()) for p in self.tmp_path.glob("retried-*.txt"))


@pytest.fixture
def jobs_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.syspath_prepend(str(HERE))
    import mysql_jobs

    yield mysql_jobs


def _scalar(template: Any, sql: str, database: str) -> int:
    return int(template.execute(sql, database)[0][-1])


def run_cluster(
    template: Any, url: str, jobs_module: Any, tmp_path: Path, *, workers: int, jobs: int
) -> ClusterResult:
    """Run ``workers`` processes over ``jobs`` jobs; assert exactly-once; return the figures."""
    from sqlalchemy.engine import make_url

    db = make_url(url).database
    assert db
    template.execute(f"DROP TABLE IF EXISTS side_effect; {jobs_module.SIDE_EFFECT_DDL}", db)
    deadlocks_before = _scalar(template, "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'", db)
    app = jobs_module.make_app(url)
    procs = Workers(tmp_path, url)
    started = time.monotonic()
    procs.start(workers)
    try:
        for first in range(0, jobs, CHUNK):
            builders = [
                app.enqueue(jobs_module.touch, n) for n in range(first, min(first + CHUNK, jobs))
            ]
            app.submit_many(builders)
        deadline = time.monotonic() + max(120.0, jobs / 50)
        done = 0
        while time.monotonic() < deadline:
            done = _scalar(
                template,
                "SELECT COUNT(*) FROM scheduler_job_end",
                db,
            )
            if done >= jobs or procs.dead():
                break
            time.sleep(0.2)  # polling the database for the real condition, not a timing guess
        seconds = time.monotonic() - started
        assert not procs.dead(), f"worker(s) {procs.dead()} died\n{procs.output()}"
        assert done == jobs, f"{done}/{jobs} jobs ended before the deadline\n{procs.output()}"
    finally:
        codes = procs.stop()
        app.close()
    assert codes == [0] * workers, f"worker exit codes {codes}\n{procs.output()}"

    ended = dict(
        template.execute(
            "SELECT terminal_status, COUNT(*) FROM scheduler_job_end GROUP BY terminal_status", db
        )
    )
    assert ended == {"SUCCEEDED": jobs}
    assert _scalar(template, "SELECT COUNT(*) FROM scheduler_job_queue", db) == 0
    runs, distinct = template.execute(
        "SELECT COUNT(*), COUNT(DISTINCT job_no) FROM side_effect", db
    )[0]
    assert (runs, distinct) == (jobs, jobs), "a job ran twice or never"
    attempts = template.execute(
        "SELECT COUNT(*), COUNT(DISTINCT job_id), MAX(attempt_no), MIN(outcome), MAX(outcome)"
        " FROM scheduler_job_execution",
        db,
    )[0]
    assert tuple(attempts) == (jobs, jobs, 1, "SUCCEEDED", "SUCCEEDED")
    logs = procs.output()
    for needle in ("Deadlock", "1213", "Lock wait timeout", "Traceback", "ERROR"):
        assert needle not in logs, f"{needle!r} escaped to a worker log\n{logs}"
    return ClusterResult(
        jobs=jobs,
        workers=workers,
        seconds=seconds,
        retried=procs.retried(),
        server_deadlocks=_scalar(template, "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'", db)
        - deadlocks_before,
    )


def _report(capsys: pytest.CaptureFixture[str], result: ClusterResult) -> None:
    with capsys.disabled():
        print(
            f"\n[mariadb-10.11 cluster] {result.workers} workers, {result.jobs} jobs in "
            f"{result.seconds:.1f} s ({result.jobs / result.seconds:.0f} jobs/s incl. start-up); "
            f"retried deadlocks/lock timeouts: {result.retried}; "
            f"server Innodb_deadlocks: {result.server_deadlocks}"
        )


def test_mariadb_1011_two_workers_run_2000_jobs_exactly_once(
    mysql_template: Any,
    mysql_database_url: str,
    jobs_module: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run_cluster(
        mysql_template, mysql_database_url, jobs_module, tmp_path, workers=2, jobs=2_000
    )
    _report(capsys, result)
    # Claims, completions and the watcher's scans lock only the rows they act on (candidates
    # are read without locks first; outcomes delete their rows by primary key): deadlocks are
    # rare (none in most runs) and every one is absorbed by the store's retry.
    assert result.retried >= result.server_deadlocks, ("a deadlock was not retried", result)
    assert result.server_deadlocks <= 2, result


@pytest.mark.slow
def test_mariadb_1011_four_workers_run_20000_jobs_exactly_once(
    mysql_template: Any,
    mysql_database_url: str,
    jobs_module: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run_cluster(
        mysql_template, mysql_database_url, jobs_module, tmp_path, workers=4, jobs=20_000
    )
    _report(capsys, result)
    # A rare deadlock can still occur at this size (1 in one run of 20,000 jobs, not traced yet;
    # the outcome batch's locking read over its id list is the suspect). Every one must be
    # absorbed by the store's retry (run_cluster checked exactly-once and clean worker logs), and
    # they must stay rare.
    assert result.retried >= result.server_deadlocks, ("a deadlock was not retried", result)
    assert result.server_deadlocks <= 5, result
