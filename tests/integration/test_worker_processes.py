"""Real ``ratchet worker`` processes on one SQLite file: end to end, exactly once, kill -9."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import procs
import sample_jobs

from ratchet import JobFilter, JobStatus, Ratchet


def statuses(app: Ratchet) -> Counter[str]:
    return Counter({k: v for k, v in app.store.count_by_status().items()})


def test_worker_process_runs_jobs_end_to_end_and_drains_on_sigterm(
    app: Ratchet, sqlite_url: str, tmp_path: Path
) -> None:
    ok = app.enqueue(sample_jobs.record, {"n": 1}).submit()
    flaky = app.enqueue(sample_jobs.fail_until, 2).with_max_retries(2).submit()
    dead = app.enqueue(sample_jobs.fail_always, "boom").with_max_retries(1).submit()
    worker = procs.start_worker(sqlite_url, log=tmp_path / "worker.log")
    try:
        settled = procs.wait_for(
            lambda: all(h.status().is_terminal for h in (ok, flaky, dead)), timeout=60
        )
        assert settled, (tmp_path / "worker.log").read_text()
        assert app.store.list_nodes(), "the worker registered its node"
    finally:
        [code] = procs.stop([worker])
    assert code == 0
    assert ok.result() == {"n": 1}
    assert (flaky.status(), flaky.result(), flaky.record().attempts) == (JobStatus.SUCCEEDED, 2, 1)
    assert dead.status() is JobStatus.FAILED
    assert "RuntimeError: boom" in (dead.record().last_error or "")
    assert app.store.list_nodes() == [], "SIGTERM deregistered the node"


def test_three_workers_run_3000_jobs_exactly_once(
    app: Ratchet, sqlite_url: str, tmp_path: Path
) -> None:
    effects = procs.make_side_effect_db(tmp_path / "effects.db")
    builders = [app.enqueue(sample_jobs.side_effect, effects, f"t{i}") for i in range(3000)]
    app.submit_many(builders)
    # Exactly once needs no node declared dead by mistake: a death margin well above the
    # heartbeat latency of three busy processes sharing one SQLite write lock on two cores.
    workers = [
        procs.start_worker(
            sqlite_url, "--concurrency", "4", "--orphan-grace", "20", log=tmp_path / f"w{i}.log"
        )
        for i in range(3)
    ]
    try:
        done = procs.wait_for(
            lambda: statuses(app).get("SUCCEEDED", 0) == 3000, timeout=240, interval=0.5
        )
        assert done, statuses(app)
    finally:
        codes = procs.stop(workers)
    assert codes == [0, 0, 0]
    rows = procs.side_effects(effects)
    tokens = Counter(t for t, _ in rows)
    assert len(rows) == 3000 and len(tokens) == 3000, "every job ran exactly once"
    assert len({pid for _, pid in rows}) == 3, "all three workers took part"
    assert app.list_jobs(JobFilter(statuses=(JobStatus.PENDING, JobStatus.RUNNING)), 10) == []


def test_kill_9_loses_no_job(app: Ratchet, sqlite_url: str, tmp_path: Path) -> None:
    effects = procs.make_side_effect_db(tmp_path / "effects.db")
    n = 60
    app.submit_many(
        [app.enqueue(sample_jobs.slow_side_effect, effects, f"k{i}", 0.2) for i in range(n)]
    )
    victim = procs.start_worker(sqlite_url, "--concurrency", "4", log=tmp_path / "victim.log")
    try:
        assert procs.wait_for(lambda: len(procs.side_effects(effects)) >= 4, timeout=60)
        assert procs.wait_for(lambda: statuses(app).get("RUNNING", 0) > 0, timeout=30)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    stranded = statuses(app).get("RUNNING", 0)
    assert stranded > 0, "the kill left claimed jobs behind (the case under test)"
    survivor = procs.start_worker(sqlite_url, "--concurrency", "4", log=tmp_path / "survivor.log")
    try:
        done = procs.wait_for(
            lambda: statuses(app).get("SUCCEEDED", 0) == n, timeout=120, interval=0.25
        )
        assert done, statuses(app)
    finally:
        assert procs.stop([survivor]) == [0]
    tokens = Counter(t for t, _ in procs.side_effects(effects))
    assert set(tokens) == {f"k{i}" for i in range(n)}, "no job was lost"
    # At least once: a job killed mid-run may run again, nothing else may.
    assert sum(tokens.values()) - n <= stranded
    recovered = [
        a
        for h in app.list_jobs(JobFilter(), 100)
        for a in app.attempts(h.job_id)
        if a.outcome == "ABANDONED"
    ]
    assert len(recovered) == stranded


STOP_FROM_ANOTHER_THREAD = """
import signal, sys, threading
from ratchet import Ratchet

app = Ratchet(sys.argv[1], allowed_modules=["sample_jobs"])
worker = app.worker(concurrency=1)

def send_sigterm_to_this_thread():
    worker.wait_until(lambda: worker._started, timeout=30)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

threading.Thread(target=send_sigterm_to_this_thread, daemon=True).start()
worker.run()
print("drained")
"""


def test_run_drains_when_sigterm_lands_on_another_thread(sqlite_url: str, tmp_path: Path) -> None:
    """Linux may deliver SIGTERM to any thread; Python runs the handler in the main thread only
    when it next executes bytecode, so ``run`` must not sit in an untimed wait."""
    script = tmp_path / "stop_from_thread.py"
    script.write_text(STOP_FROM_ANOTHER_THREAD)
    done = subprocess.run(
        [sys.executable, str(script), sqlite_url], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, "drained"), done.stderr


STOP_WHILE_RUN_HOLDS_ITS_LOCK = """
import signal, sys, threading
from ratchet import Ratchet

app = Ratchet(sys.argv[1], allowed_modules=["sample_jobs"])
worker = app.worker(concurrency=1)
original_wait = worker._stopping.wait

def wait_then_signal(timeout=None):
    # Deliver SIGTERM at the worst moment: while run()'s wait holds the event's lock (where a
    # real signal can arrive too, between two bytecodes of Event.wait).
    with worker._stopping._cond:
        signal.raise_signal(signal.SIGTERM)
    return original_wait(timeout)

worker._stopping.wait = wait_then_signal
worker.run()
print("drained")
"""


def test_run_drains_when_sigterm_arrives_inside_its_own_wait(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The handler runs on the main thread, possibly inside ``run``'s wait on the stop event,
    whose lock that wait then holds: a handler that set the event would deadlock there."""
    script = tmp_path / "stop_inside_wait.py"
    script.write_text(STOP_WHILE_RUN_HOLDS_ITS_LOCK)
    done = subprocess.run(
        [sys.executable, str(script), sqlite_url], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, "drained"), done.stderr
