"""Helpers to run real ``ratchet worker`` processes in tests."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ratchet.testing import wait_until

SUPPORT = Path(__file__).resolve().parent

FAST_POLLING = [
    "--min-delay",
    "0.05",
    "--max-delay",
    "0.2",
    "--burst-delay",
    "0.02",
    "--heartbeat",
    "0.5",
    "--orphan-grace",
    "3",
    "--orphan-scan",
    "0.5",
    "--drain-timeout",
    "5",
]


def worker_env(url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env["RATCHET_TEST_URL"] = url
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT from stop() dumps every thread's stack to the log
    env.update(extra)
    return env


def start_worker(
    url: str, *args: str, app: str = "sample_app:app", log: Path | None = None, **env: str
) -> subprocess.Popen[bytes]:
    """Start ``ratchet worker`` as a child process (stdout+stderr to ``log`` if given)."""
    cmd = [
        sys.executable,
        "-m",
        "ratchet.cli",
        "worker",
        app,
        "--log-level",
        "WARNING",
        *FAST_POLLING,
        *args,
    ]
    if log is None:
        return subprocess.Popen(
            cmd,
            env=worker_env(url, **env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            cwd=str(SUPPORT),
        )
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            cmd, env=worker_env(url, **env), stdout=out, stderr=subprocess.STDOUT, cwd=str(SUPPORT)
        )


def stop(procs: Sequence[subprocess.Popen[bytes]], timeout: float = 30) -> list[int]:
    """SIGTERM every process and wait; returns their exit codes.

    A process still running after ``timeout`` gets SIGABRT (its faulthandler writes every
    thread's stack to its log, which tells why it hung), then SIGKILL.
    """
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGABRT)
            try:
                codes.append(p.wait(timeout=5))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
    return codes


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds passed (waiting on real processes)."""
    return wait_until(predicate, timeout, interval=interval)


def make_side_effect_db(path: Path) -> str:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE side_effect(token TEXT NOT NULL, pid INTEGER NOT NULL)")
    conn.commit()
    conn.close()
    return str(path)


def side_effects(path: str) -> list[tuple[str, int]]:
    conn = sqlite3.connect(path, timeout=30)
    try:
        return list(conn.execute("SELECT token, pid FROM side_effect"))
    finally:
        conn.close()
