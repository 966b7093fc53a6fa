"""``ratchet demo``: real jobs on the embedded SQLite store, end to end.

Submits an immediate job, a delayed one, three prioritised ones, a flaky one that succeeds on its
third attempt after exponential backoff, and one that exhausts its retries into the DLQ; runs a
worker until all of them settle and prints what happened to each.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
import time
from datetime import timedelta

from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.options import BackoffPolicy
from ratchet.engine.context import JobContext

ORDER: list[str] = []


def greet(name: str) -> str:
    """An immediate job."""
    ORDER.append(f"greet {name}")
    return f"hello, {name}"


def remind(what: str) -> str:
    """A delayed job."""
    ORDER.append(f"remind {what}")
    return f"reminded: {what}"


def report(level: str) -> str:
    """A job submitted at several priorities."""
    ORDER.append(f"report {level}")
    return f"{level} report done"


def flaky_charge(amount: int) -> dict[str, int]:
    """Fails on its first two attempts, then succeeds."""
    attempt = JobContext.current().attempt
    ORDER.append(f"flaky attempt {attempt}")
    if attempt < 3:
        raise ConnectionError(f"payment gateway timed out (attempt {attempt})")
    return {"charged": amount, "attempts": attempt}


def broken_import(path: str) -> None:
    """Always fails: ends in the dead-letter queue."""
    ORDER.append("broken attempt")
    raise FileNotFoundError(f"no such file: {path}")


def run_demo(db_path: str | None = None, *, quiet_logs: bool = True) -> int:
    """Run the demo; returns 0 when every job ended as expected, 1 otherwise."""
    from ratchet.engine.app import Ratchet

    if quiet_logs:
        logging.basicConfig(level=logging.ERROR)
    workdir = None
    if db_path is None:
        workdir = tempfile.mkdtemp(prefix="ratchet-demo-")
        db_path = os.path.join(workdir, "demo.db")
    app = Ratchet(f"sqlite:///{db_path}", allowed_modules=["ratchet.demo"])
    print(f"Ratchet demo on sqlite:///{db_path}\n")
    ORDER.clear()
    jobs = {
        "immediate": app.enqueue_now(greet, "world"),
        "delayed 1s": app.schedule(timedelta(seconds=1), remind, "water the plants").submit(),
        "priority LOW": app.enqueue(report, "low").with_priority(JobPriority.LOW).submit(),
        "priority CRITICAL": app.enqueue(report, "critical")
        .with_priority(JobPriority.CRITICAL)
        .submit(),
        "priority HIGH": app.enqueue(report, "high").with_priority(JobPriority.HIGH).submit(),
        "flaky (retried)": app.enqueue(flaky_charge, 1200)
        .with_max_retries(3)
        .with_backoff(BackoffPolicy.EXPONENTIAL, timedelta(milliseconds=200))
        .submit(),
        "broken (DLQ)": app.enqueue(broken_import, "/data/missing.csv")
        .with_max_retries(1)
        .submit(),
    }
    worker = app.worker(
        concurrency=1,
        batch_size=1,
        min_delay=timedelta(milliseconds=100),
        max_delay=timedelta(milliseconds=200),
        burst_delay=timedelta(milliseconds=50),
    )
    started = time.monotonic()
    worker.start()
    settled = worker.wait_until(
        lambda: all(app.get_job(h.id).status.is_terminal for h in jobs.values()),  # type: ignore[union-attr]
        timeout=30,
    )
    worker.stop()
    elapsed = time.monotonic() - started
    print(f"{'job':<20} {'status':<10} {'attempts':>8}  result / error")
    print("-" * 78)
    expected = {"flaky (retried)": "SUCCEEDED", "broken (DLQ)": "FAILED"}
    ok = settled
    for label, handle in jobs.items():
        rec = app.get_job(handle.id)
        assert rec is not None
        detail = rec.result if rec.result is not None else (rec.last_error or "")
        print(f"{label:<20} {rec.status.value:<10} {rec.attempts_started:>8}  {detail}")
        ok = ok and rec.status.value == expected.get(label, "SUCCEEDED")
    print("\nexecution order:", ", ".join(ORDER))
    history = app.attempts(jobs["flaky (retried)"].id)
    gaps = [
        f"{(b.started_at - a.finished_at).total_seconds():.2f}s"
        for a, b in itertools.pairwise(history)
        if a.finished_at is not None
    ]
    print("flaky job backoff between attempts:", ", ".join(gaps))
    print(
        f"\nsettled in {elapsed:.1f}s: {'all jobs ended as expected' if ok else 'UNEXPECTED OUTCOME'}"
    )
    app.close()
    return 0 if ok else 1
