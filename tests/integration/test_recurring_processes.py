"""Recurring masters with real ``ratchet worker`` processes and real time, on SQLite."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import procs
import pytest

from ratchet import Ratchet, RecurringStatus
from ratchet.domain.recurring import FIRE_TIME_PARAM


@pytest.fixture
def observer(sqlite_url: str) -> Iterator[Ratchet]:
    """An app in the test process that only reads (it has no decorators and runs no worker)."""
    app = Ratchet(sqlite_url, allowed_modules=["recurring_app"])
    yield app
    app.close()


def test_two_worker_processes_create_one_occurrence_per_second(
    observer: Ratchet, sqlite_url: str, tmp_path: Path
) -> None:
    effects = procs.make_side_effect_db(tmp_path / "effects.db")
    env = {"RATCHET_TEST_RECURRING": "v1", "RATCHET_TEST_EFFECTS": effects}
    workers = [
        procs.start_worker(
            sqlite_url,
            "--recurring-interval",
            "0.2",
            app="recurring_app:app",
            log=tmp_path / f"w{i}.log",
            **env,
        )
        for i in range(2)
    ]
    try:
        assert procs.wait_for(lambda: observer.find_recurring("tick") is not None, timeout=60)
        # Let it run for about ten seconds of fire times (a condition, not a fixed sleep).
        assert procs.wait_for(lambda: len(procs.side_effects(effects)) >= 10, timeout=60)
    finally:
        stopped = datetime.now(UTC)
        codes = procs.stop(workers)
    logs = "\n".join((tmp_path / f"w{i}.log").read_text() for i in range(2))
    assert codes == [0, 0], logs
    masters = observer.list_recurring()
    assert sorted(m.business_key or "" for m in masters) == ["recurring_app.hourly", "tick"], (
        "both workers registered the same decorators: one master each"
    )
    tick = observer.find_recurring("tick")
    assert tick is not None
    fires = sorted(
        datetime.fromisoformat(j.params[FIRE_TIME_PARAM])
        for j in observer.recurring_fires(tick.recurring_id)
    )
    assert len(fires) == len(set(fires)), Counter(fires).most_common(3)
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(fires)), fires
    elapsed = (stopped - tick.created_at).total_seconds()
    assert abs(len(fires) - elapsed) <= 1, (len(fires), elapsed)
    ran = Counter(token for token, _ in procs.side_effects(effects))
    assert ran and max(ran.values()) == 1, "every occurrence ran at most once"
    assert set(ran) <= {f.isoformat() for f in fires}


REPORT = "import dataclasses, json; print(json.dumps(dataclasses.asdict(r)), flush=True)"


def _register(url: str, variant: str) -> dict[str, list[str]]:
    """Register ``recurring_app``'s decorators of ``variant`` from a fresh process."""
    code = f"import recurring_app; r = recurring_app.app.register_recurring_jobs(); {REPORT}"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=procs.worker_env(url, RATCHET_TEST_RECURRING=variant),
        cwd=str(procs.SUPPORT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_decorators_registered_from_several_processes(observer: Ratchet, sqlite_url: str) -> None:
    first = _register(sqlite_url, "v1")
    assert sorted(first["created"]) == ["recurring_app.hourly", "tick"]
    tick = observer.find_recurring("tick")
    assert tick is not None
    assert (tick.cron, tick.priority.name, tick.tags) == ("* * * * * ?", "CRITICAL", ("clock",))
    changed = _register(sqlite_url, "v2")
    assert (changed["updated"], changed["canceled"]) == (["tick"], ["recurring_app.hourly"])
    updated = observer.find_recurring("tick")
    assert updated is not None and updated.recurring_id == tick.recurring_id
    assert updated.cron == "*/5 * * * * ?"
    gone = _register(sqlite_url, "none")
    assert gone["canceled"] == ["tick"]
    assert observer.list_recurring() == []
    statuses = {m.business_key: m.status for m in observer.list_recurring(active_only=False)}
    assert statuses == {
        "tick": RecurringStatus.CANCELED,
        "recurring_app.hourly": RecurringStatus.CANCELED,
    }


def test_processes_registering_at_once_leave_one_master_per_id(
    observer: Ratchet, sqlite_url: str
) -> None:
    code = (
        "import sys, time, recurring_app\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "while (r := recurring_app.app.register_recurring_jobs()) is None:\n"
        "    time.sleep(0.05)  # another process holds the start-up lease: try again\n"
        f"{REPORT}\n"
    )
    env = procs.worker_env(sqlite_url, RATCHET_TEST_RECURRING="v1")
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            cwd=str(procs.SUPPORT),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for child in children:  # every interpreter has imported the app: start them together
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    outputs = [c.communicate("go\n", timeout=60) for c in children]
    assert [c.returncode for c in children] == [0, 0, 0], [err for _, err in outputs]
    reports = [json.loads(out) for out, _ in outputs]
    assert sorted(len(r["created"]) for r in reports) == [0, 0, 2]
    assert sorted(len(r["unchanged"]) for r in reports) == [0, 2, 2], "the others found them"
    assert sorted(m.business_key or "" for m in observer.list_recurring()) == [
        "recurring_app.hourly",
        "tick",
    ]
