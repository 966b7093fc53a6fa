"""The watcher's pure rules (ratchet.domain.watcher) and the diagram in docs/clustering.md."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.config import WorkerConfig
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.lifecycle import TRANSITIONS, JobStatus
from ratchet.domain.watcher import (
    Checkpoint,
    JobLiveness,
    WatcherAction,
    WatcherSettings,
    check_checkpoint,
    classify,
    heartbeat_delay,
    orphaned_timed_out_at,
    takeover_eligible,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = WatcherSettings()
US = timedelta(microseconds=1)
DOC = Path(__file__).resolve().parents[2] / "docs" / "clustering.md"


def job(status: JobStatus, **kw: object) -> JobLiveness:
    fields: dict[str, object] = {
        "job_id": uuid.uuid4(),
        "status": status,
        "epoch": 1,
        "picked_by": "a",
        "picked_at": T0,
        "last_progress_at": None,
        "timed_out_at": None,
        "takeovers": 0,
        "attempts": 0,
    }
    fields.update(kw)
    return JobLiveness(**fields)  # type: ignore[arg-type]


def test_queued_stall_and_dead_owner() -> None:
    q = job(JobStatus.QUEUED)
    assert classify(q, T0 + S.queued_stall - US, S, owner_alive=True) is WatcherAction.NONE
    assert classify(q, T0 + S.queued_stall, S, owner_alive=True) is WatcherAction.REVOKE
    assert classify(q, T0, S, owner_alive=False) is WatcherAction.REVOKE
    assert classify(job(JobStatus.PENDING, picked_by=None), T0, S, owner_alive=False) is (
        WatcherAction.NONE
    )


def test_running_stall_only_for_jobs_that_report_progress_or_have_a_stall_timeout() -> None:
    silent = job(JobStatus.RUNNING)
    later = T0 + timedelta(days=1)
    assert classify(silent, later, S, owner_alive=True) is WatcherAction.NONE
    assert classify(silent, T0, S, owner_alive=False) is WatcherAction.ORPHAN
    reporting = job(JobStatus.RUNNING, last_progress_at=T0 + timedelta(seconds=10))
    due = T0 + timedelta(seconds=10) + S.running_stall
    assert classify(reporting, due - US, S, owner_alive=True) is WatcherAction.NONE
    assert classify(reporting, due, S, owner_alive=True) is WatcherAction.STALL
    own = job(JobStatus.RUNNING, stall_timeout=timedelta(seconds=5))
    assert classify(own, T0 + timedelta(seconds=5) - US, S, owner_alive=True) is WatcherAction.NONE
    assert classify(own, T0 + timedelta(seconds=5), S, owner_alive=True) is WatcherAction.STALL
    # A takeover (picked_at later than the last progress) restarts the clock.
    taken = job(JobStatus.RUNNING, last_progress_at=T0, picked_at=T0 + timedelta(seconds=50))
    assert taken.last_activity == T0 + timedelta(seconds=50)


def test_takeover_grace_window_and_cap() -> None:
    t = job(JobStatus.TIMED_OUT, timed_out_at=T0)
    grace, window = S.timed_out_grace, S.timed_out_grace + S.takeover_window
    assert not takeover_eligible(t, T0 + grace - US, S, owner_alive=True, taker="b")
    assert takeover_eligible(t, T0 + grace, S, owner_alive=True, taker="b")
    assert not takeover_eligible(t, T0 + grace, S, owner_alive=True, taker="a"), "its owner"
    assert takeover_eligible(t, T0, S, owner_alive=False, taker="b"), "dead owner: at once"
    assert not takeover_eligible(t, T0 + window, S, owner_alive=True, taker="b")
    assert classify(t, T0 + window - US, S, owner_alive=True) is WatcherAction.NONE
    assert classify(t, T0 + window, S, owner_alive=True) is WatcherAction.EXPIRE
    capped = job(JobStatus.TIMED_OUT, timed_out_at=T0, takeovers=S.max_takeovers)
    assert not takeover_eligible(capped, T0 + grace, S, owner_alive=False, taker="b")
    assert classify(capped, T0 + grace - US, S, owner_alive=True) is WatcherAction.NONE
    assert classify(capped, T0 + grace, S, owner_alive=True) is WatcherAction.EXPIRE
    orphan = job(JobStatus.TIMED_OUT, timed_out_at=orphaned_timed_out_at(T0, S))
    assert takeover_eligible(orphan, T0, S, owner_alive=True, taker="b")


@given(
    status=st.sampled_from(list(JobStatus)),
    offset=st.integers(0, 10**9),
    alive=st.booleans(),
    takeovers=st.integers(0, 5),
)
def test_no_premature_action(status: JobStatus, offset: int, alive: bool, takeovers: int) -> None:
    """Whatever the job, an action needs its deadline (or a dead owner)."""
    now = T0 + timedelta(milliseconds=offset)
    v = job(status, timed_out_at=T0, last_progress_at=T0, takeovers=takeovers)
    action = classify(v, now, S, owner_alive=alive)
    waited = now - T0
    if action is WatcherAction.REVOKE:
        assert not alive or waited >= S.queued_stall
    if action is WatcherAction.STALL:
        assert alive and waited >= S.running_stall
    if action is WatcherAction.ORPHAN:
        assert not alive
    if action is WatcherAction.EXPIRE:
        assert waited >= S.timed_out_grace + S.takeover_window or (
            takeovers >= S.max_takeovers and waited >= S.timed_out_grace
        )
    if takeover_eligible(v, now, S, owner_alive=alive, taker="b"):
        assert waited >= S.timed_out_grace or not alive
        assert takeovers < S.max_takeovers


def test_checkpoints() -> None:
    previous = Checkpoint(3, {"a": 1}, 2, T0)
    assert check_checkpoint(previous, 2, 3, [1]) == "[1]"
    assert check_checkpoint(previous, 3, 0, None) == "null", "a new run may start over"
    with pytest.raises(ValueError, match="backwards"):
        check_checkpoint(previous, 2, 2, None)
    for bad in (-1, True, "1"):
        with pytest.raises(ValueError, match="non-negative int"):
            check_checkpoint(None, 1, bad, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="JSON"):
        check_checkpoint(None, 1, 1, float("nan"))


def test_heartbeat_delay_adapts_to_load_and_stays_under_a_third_of_dn() -> None:
    base, dn = timedelta(seconds=10), timedelta(seconds=30)
    assert heartbeat_delay(base, dn, 1.0) == base
    assert heartbeat_delay(base, dn, 0.0) == timedelta(seconds=10)  # capped at Dn / 3
    assert heartbeat_delay(base, timedelta(minutes=5), 0.0) == 2 * base
    assert heartbeat_delay(base, timedelta(minutes=5), 0.5) == 1.5 * base
    assert heartbeat_delay(base, timedelta(minutes=5), 7.0) == base


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="running_stall"):
        WatcherSettings(running_stall=timedelta(0))
    with pytest.raises(ConfigurationError, match="max_takeovers"):
        WatcherSettings(max_takeovers=-1)
    with pytest.raises(ConfigurationError, match="prefetch"):
        WorkerConfig(prefetch=-1)
    assert WorkerConfig().watcher_settings() == WatcherSettings()


def test_deadlines_keep_the_margins_of_the_spec() -> None:
    """Dn >= 3 heartbeats and a watcher pass at least four times per D1 and D2."""
    second = timedelta(seconds=1)
    WorkerConfig(heartbeat_interval=10 * second, orphan_grace=30 * second)  # exactly 3x: fine
    with pytest.raises(ConfigurationError, match=r"orphan_grace .* at least 3 x heartbeat"):
        WorkerConfig(heartbeat_interval=10 * second, orphan_grace=29 * second)
    WorkerConfig(watcher_interval=15 * second, running_stall=60 * second)  # exactly a quarter
    with pytest.raises(ConfigurationError, match=r"watcher_interval .* min\(running_stall"):
        WorkerConfig(watcher_interval=16 * second, running_stall=60 * second)
    with pytest.raises(ConfigurationError, match="watcher_interval"):
        WorkerConfig(watcher_interval=16 * second, timed_out_grace=60 * second)
    # With the watcher off its interval does not matter.
    WorkerConfig(watcher_interval=100 * second, watcher_enabled=False)


def test_the_clustering_diagram_draws_only_legal_moves() -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Liveness, takeover and recovery") :]
    block = re.search(r"```mermaid\n(.*?)```", section, re.DOTALL)
    assert block is not None
    edges = re.findall(r"^\s*([A-Z_]+) --> ([A-Z_]+) :", block.group(1), re.MULTILINE)
    assert edges
    for source, target in edges:
        if source != target:  # progress keeps a job RUNNING
            assert (JobStatus(source), JobStatus(target)) in TRANSITIONS, (source, target)
