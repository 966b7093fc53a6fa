"""Chaos runs with real ``ratchet worker`` processes: SIGKILL, SIGSTOP past the deadlines and
SIGCONT, while every job records ``(job id, epoch)`` through a fencing-token resource.

:func:`run_chaos` drives one run and checks what must hold afterwards (see :class:`Chaos`).
"""

from __future__ import annotations

import json
import random
import re
import signal
import sqlite3
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chaos_jobs
import procs

from ratchet import JobFilter, JobStatus, Ratchet

#: Log lines of a refused write: a progress write (FencedOut, fatal) or an outcome.
FENCE_MARKERS = ("FencedOut", "no longer owns it")
#: The log line of a node that resumed, found itself declared dead and fenced out its own runs
#: before any of them tried to write (only counted when it had runs in flight).
NODE_FENCED = re.compile(
    r"declared dead \(silent past [^)]*\); its ([1-9]\d*) running job\(s\) are fenced out"
)


@dataclass
class Proc:
    name: str
    index: int
    popen: subprocess.Popen[bytes]
    log: Path
    zombie: bool = False
    """Frozen past the deadlines and resumed: the only kind allowed to be fenced out."""
    killed: bool = False


@dataclass
class Chaos:
    """One chaos run over ``url`` with side effects in ``effects``."""

    app: Ratchet
    url: str
    effects: str
    directory: Path
    workers: int
    jobs: int
    worker_args: tuple[str, ...]
    freeze_seconds: float
    seed: int = 7
    kills: int = 0
    freezes: int = 0
    steps: int = 3
    step_ms: int = 15
    procs: list[Proc] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ processes
    def start(self, name: str) -> Proc:
        index = len(self.procs)
        log = self.directory / f"{name}-{index}.log"
        popen = procs.start_worker(
            self.url,
            *self.worker_args,
            app="chaos_app:app",
            log=log,
            RATCHET_CHAOS_NODE=name,
            RATCHET_CHAOS_EFFECTS=self.effects,
        )
        proc = Proc(name, index, popen, log)
        self.procs.append(proc)
        return proc

    def running(self) -> list[Proc]:
        return [p for p in self.procs if p.popen.poll() is None]

    def logs(self) -> str:
        return "\n".join(f"== {p.log.name}\n{p.log.read_text()[-12000:]}" for p in self.procs)

    # ------------------------------------------------------------------ progress
    def done(self) -> int:
        counts = self.app.store.count_by_status()
        return sum(counts.get(s, 0) for s in ("SUCCEEDED", "FAILED", "CANCELED"))

    def wait_done(self, at_least: int, timeout: float) -> None:
        ok = procs.wait_for(lambda: self.done() >= at_least, timeout=timeout, interval=0.2)
        assert ok, f"stuck at {self.done()}/{self.jobs}: {self.app.store.count_by_status()}"

    # ------------------------------------------------------------------ the run
    def submit(self) -> None:
        for start in range(0, self.jobs, 1000):
            builders = [
                self.app.enqueue(chaos_jobs.step, self.steps, self.step_ms).with_max_retries(5)
                for _ in range(start, min(self.jobs, start + 1000))
            ]
            self.app.submit_many(builders)

    def owns_running(self, victim: Proc) -> bool:
        """Whether one of ``victim``'s incarnations (``name-pid-…``) owns a RUNNING job."""
        mark = f"{victim.name}-{victim.popen.pid}-"
        views = self.app.store.job_liveness()  # type: ignore[attr-defined]
        return any(
            v.status is JobStatus.RUNNING and (v.picked_by or "").startswith(mark) for v in views
        )

    def busy_victim(self, rng: random.Random) -> Proc:
        """A running worker that owns a RUNNING job now (so the chaos hits a run in flight),
        chosen at random among those that do."""
        busy: list[Proc] = []

        def some_busy() -> bool:
            owners = [
                v.picked_by or ""
                for v in self.app.store.job_liveness()  # type: ignore[attr-defined]
                if v.status is JobStatus.RUNNING
            ]
            busy[:] = [
                p
                for p in self.running()
                if any(o.startswith(f"{p.name}-{p.popen.pid}-") for o in owners)
            ]
            return bool(busy)

        assert procs.wait_for(some_busy, timeout=30, interval=0.01), (
            "no worker owns a running job",
            self.logs(),
        )
        return rng.choice(busy)

    def write_lock_free(self) -> bool:
        """Whether a writer gets the write lock of every SQLite file the jobs use within 0.3 s:
        the job store's and the side-effect resource's. A process frozen inside a write holds
        that file's lock, and every other worker's writes (or every job's fenced write) then
        wait: their runs stop making progress and are rightly taken over, which is not the
        chaos this run means. Databases that lock rows, not files, need no probe."""
        files = []
        if self.url.startswith("sqlite"):
            files.append(self.url.split("///", 1)[1])
        if not chaos_jobs.is_postgres(self.effects):
            files.append(self.effects)
        return all(_sqlite_write_lock_free(path) for path in files)

    def kill(self, rng: random.Random) -> None:
        while True:
            victim = self.busy_victim(rng)
            victim.popen.send_signal(signal.SIGKILL)
            victim.popen.wait()
            # Its run may have ended (outcome written) between the choice and the signal: only
            # a kill that left a RUNNING job behind counts, else kill again.
            hit = self.owns_running(victim)
            self.start(victim.name)  # the replacement recovers its previous incarnation at once
            if hit:
                victim.killed = True
                self.actions.append(f"SIGKILL {victim.name}-{victim.index}")
                return

    def freeze(self, rng: random.Random) -> None:
        victim = self.busy_victim(rng)
        victim.popen.send_signal(signal.SIGSTOP)
        # It must be frozen with a run in flight (that run is the zombie to be fenced out), and
        # the others must keep finishing jobs meanwhile: a process frozen inside a write (the
        # SQLite write lock, a row lock) would freeze everybody, not just itself.
        while True:
            started, base = time.monotonic(), self.done()
            if (
                self.owns_running(victim)
                and self.write_lock_free()
                and procs.wait_for(lambda b=base: self.done() > b, timeout=1, interval=0.05)
            ):
                break
            victim.popen.send_signal(signal.SIGCONT)
            assert procs.wait_for(lambda: self.owns_running(victim), timeout=30, interval=0.01)
            victim.popen.send_signal(signal.SIGSTOP)
        time.sleep(max(0.0, started + self.freeze_seconds - time.monotonic()))
        victim.popen.send_signal(signal.SIGCONT)  # past Dn, D1 and D2: a zombie now
        victim.zombie = True
        self.actions.append(f"SIGSTOP {victim.name}-{victim.index} {self.freeze_seconds}s")

    def run(self, kills: int, freezes: int, timeout: float) -> None:
        self.kills, self.freezes = kills, freezes
        rng = random.Random(self.seed)
        self.submit()
        for i in range(self.workers):
            self.start(f"w{i}")
        try:
            plan = ["kill"] * kills + ["freeze"] * freezes
            rng.shuffle(plan)
            for n, action in enumerate(plan, start=1):
                # Spread the chaos over the run, while every worker is busy.
                self.wait_done(self.jobs * n // (len(plan) + 2), timeout)
                (self.kill if action == "kill" else self.freeze)(rng)
            self.wait_done(self.jobs, timeout)
        finally:
            stopping = self.running()
            codes = procs.stop([p.popen for p in stopping], timeout=60)
        named = {f"{p.name}-{p.index}": code for p, code in zip(stopping, codes, strict=True)}
        assert codes == [0] * len(codes), (named, self.actions, self.logs())

    # ------------------------------------------------------------------ what must hold
    def verify(self) -> dict[str, Any]:
        app = self.app
        counts = app.store.count_by_status()
        assert counts.get("SUCCEEDED") == self.jobs, (counts, self.actions, self.logs())
        # Every SUCCEEDED job's result comes from its final epoch, and no stale epoch won.
        final: dict[str, int] = {}
        takeovers = 0
        abandoned: set[str] = set()
        records = app.list_jobs(JobFilter(), limit=self.jobs + 10)
        assert len(records) == self.jobs
        for rec in records:
            history = app.attempts(rec.job_id)
            won = [a for a in history if a.outcome == "SUCCEEDED"]
            assert len(won) == 1, history
            last = max(a.epoch for a in history)
            assert won[0].epoch == last, ("a stale epoch's outcome was accepted", history)
            result = json.loads(rec.result or "null")
            assert result["job"] == str(rec.job_id) and result["epoch"] == last
            assert result["accepted"] is True
            final[str(rec.job_id)] = last
            takeovers += sum(1 for a in history if a.outcome == "ABANDONED")
            abandoned.update(a.node_id for a in history if a.outcome == "ABANDONED")
        # The side-effect resource accepted epochs in order only, the final one last.
        highest: dict[str, int] = defaultdict(int)
        last_accepted: dict[str, int] = {}
        refused = 0
        for _, job, epoch, _, accepted in chaos_jobs.effects(self.effects):
            if accepted:
                assert epoch >= highest[job], "a write from a stale epoch was accepted"
                highest[job] = epoch
                last_accepted[job] = epoch
            else:
                assert epoch < highest[job]
                refused += 1
        assert last_accepted == final, "every job's last accepted effect is its final epoch"
        # Only resumed zombies were ever fenced out, and every one of them was: each was frozen
        # with a run in flight, which was taken over (or its node declared dead) meanwhile.
        fenced = Counter()
        for p in self.procs:
            text = p.log.read_text(errors="replace")
            hits = sum(text.count(marker) for marker in FENCE_MARKERS)
            hits += len(NODE_FENCED.findall(text))
            if not p.zombie:
                assert hits == 0, (p.log.name, self.actions, text[-4000:])
            fenced[p.log.name] = hits
        zombies = [p for p in self.procs if p.zombie]
        assert all(fenced[p.log.name] > 0 for p in zombies), (
            fenced,
            self.actions,
            self.logs(),
        )
        # The chaos really happened: every killed and every frozen process had running jobs
        # taken over (attempts closed as ABANDONED under one of its incarnations: name-pid-…).
        for p in self.procs:
            if p.killed or p.zombie:
                mark = f"{p.name}-{p.popen.pid}-"
                assert any(node.startswith(mark) for node in abandoned), (
                    f"{p.name}-{p.index} was {'killed' if p.killed else 'frozen'} but none of "
                    "its jobs was taken over",
                    self.actions,
                    sorted(abandoned),
                )
        done = Counter(action.split()[0] for action in self.actions)
        assert (done["SIGKILL"], done["SIGSTOP"]) == (self.kills, self.freezes), self.actions
        return {"takeovers": takeovers, "refused_effects": refused, "fenced": dict(fenced)}


def run_chaos(
    app: Ratchet,
    url: str,
    directory: Path,
    *,
    workers: int,
    jobs: int,
    kills: int,
    freezes: int,
    worker_args: tuple[str, ...],
    freeze_seconds: float,
    effects: str | None = None,
    timeout: float = 240,
    step_ms: int = 15,
) -> dict[str, Any]:
    """Run the chaos scenario and verify it; returns a few figures for the test to report."""
    target = effects or str(directory / "effects.db")
    chaos_jobs.create_effects(target)
    chaos = Chaos(
        app,
        url,
        target,
        directory,
        workers,
        jobs,
        worker_args,
        freeze_seconds,
        step_ms=step_ms,
    )
    chaos.run(kills, freezes, timeout)
    return chaos.verify()


def _sqlite_write_lock_free(path: str) -> bool:
    """Whether ``BEGIN IMMEDIATE`` on the SQLite file at ``path`` succeeds within 0.3 s."""
    conn = sqlite3.connect(path, timeout=0.3, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()
