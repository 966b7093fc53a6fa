"""The job status transition table."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.lifecycle import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    TRANSITIONS,
    IllegalTransition,
    JobPriority,
    JobStatus,
    check_transition,
    is_allowed,
    sources_of,
)

S = JobStatus
ALL_SOURCES: list[JobStatus | None] = [None, *JobStatus]


def targets_of(source: JobStatus | None) -> set[JobStatus]:
    return {t for (s, t) in TRANSITIONS if s is source}


def reachable_from(start: JobStatus | None) -> set[JobStatus]:
    seen: set[JobStatus] = set()
    todo = list(targets_of(start))
    while todo:
        status = todo.pop()
        if status not in seen:
            seen.add(status)
            todo.extend(targets_of(status))
    return seen


def test_terminal_and_live_statuses_partition_all_statuses() -> None:
    assert {S.SUCCEEDED, S.FAILED, S.CANCELED} == TERMINAL_STATUSES
    assert set(JobStatus) - TERMINAL_STATUSES == LIVE_STATUSES
    for status in JobStatus:
        assert status.is_terminal is (status in TERMINAL_STATUSES)
        assert status.is_live is (not status.is_terminal)


def test_statuses_are_persisted_by_name() -> None:
    for status in JobStatus:
        assert status.value == status.name
        assert JobStatus(status.name) is status


def test_priority_ordinals_are_stable() -> None:
    assert [(p.name, int(p)) for p in JobPriority] == [
        ("LOWEST", 0),
        ("LOW", 1),
        ("NORMAL", 2),
        ("HIGH", 3),
        ("CRITICAL", 4),
    ]


def test_terminal_statuses_absorb_except_the_operator_retry() -> None:
    assert targets_of(S.SUCCEEDED) == set()
    assert targets_of(S.CANCELED) == set()
    assert targets_of(S.FAILED) == {S.PENDING}


def test_jobs_are_created_pending_or_waiting() -> None:
    assert targets_of(None) == {S.PENDING, S.WAITING}


def test_every_status_is_reachable_from_creation() -> None:
    assert reachable_from(None) == set(JobStatus)


def test_every_live_status_can_end() -> None:
    for status in LIVE_STATUSES:
        assert reachable_from(status) & TERMINAL_STATUSES, status


def test_every_live_status_can_be_canceled() -> None:
    for status in LIVE_STATUSES:
        assert is_allowed(status, S.CANCELED), status


def test_no_self_loops() -> None:
    assert all(s is not t for (s, t) in TRANSITIONS)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (S.PENDING, S.RUNNING),  # claim
        (S.RUNNING, S.SUCCEEDED),
        (S.RUNNING, S.PENDING),  # retry, breaker open, orphan recovery
        (S.RUNNING, S.FAILED),  # dead letter
        (S.FAILED, S.PENDING),  # operator retry_job
        (S.PENDING, S.PAUSED),
        (S.PAUSED, S.PENDING),
        (S.WAITING, S.PENDING),  # signal delivered
        (S.WAITING, S.FAILED),  # signal timeout
        (S.RUNNING, S.CANCELED),
    ],
)
def test_documented_moves_are_allowed(source: JobStatus, target: JobStatus) -> None:
    check_transition(source, target)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (S.SUCCEEDED, S.PENDING),
        (S.CANCELED, S.PENDING),
        (S.FAILED, S.RUNNING),
        (S.FAILED, S.PAUSED),  # only PENDING jobs can be paused
        (S.RUNNING, S.PAUSED),
        (S.WAITING, S.PAUSED),
        (S.PENDING, S.SUCCEEDED),
        (None, S.RUNNING),
        (None, S.SUCCEEDED),
    ],
)
def test_notable_moves_are_refused(source: JobStatus | None, target: JobStatus) -> None:
    assert not is_allowed(source, target)
    with pytest.raises(IllegalTransition):
        check_transition(source, target)


@given(source=st.sampled_from(ALL_SOURCES), target=st.sampled_from(list(JobStatus)))
def test_check_transition_agrees_with_the_table(
    source: JobStatus | None, target: JobStatus
) -> None:
    if (source, target) in TRANSITIONS:
        assert is_allowed(source, target)
        check_transition(source, target)
    else:
        assert not is_allowed(source, target)
        with pytest.raises(IllegalTransition) as info:
            check_transition(source, target)
        assert (info.value.source, info.value.target) == (source, target)
        assert target.value in str(info.value)
        assert (source.value if source else "(new)") in str(info.value)


def test_check_transition_exhaustively() -> None:
    refused = 0
    for source, target in itertools.product(ALL_SOURCES, JobStatus):
        try:
            check_transition(source, target)
        except IllegalTransition:
            refused += 1
            assert (source, target) not in TRANSITIONS
        else:
            assert (source, target) in TRANSITIONS
    assert refused == len(ALL_SOURCES) * len(JobStatus) - len(TRANSITIONS)


def test_sources_of_examples() -> None:
    assert sources_of(S.RUNNING) == (S.PENDING, S.QUEUED, S.TIMED_OUT)
    assert sources_of(S.PENDING) == (
        S.FAILED,
        S.PAUSED,
        S.QUEUED,
        S.RUNNING,
        S.TIMED_OUT,
        S.WAITING,
    )
    assert sources_of(S.PENDING, among=[S.RUNNING, S.SUCCEEDED]) == (S.RUNNING,)
    assert sources_of(S.WAITING) == ()  # only creation leads there
    assert sources_of(S.CANCELED, among=()) == ()


@given(
    target=st.sampled_from(list(JobStatus)),
    among=st.none() | st.sets(st.sampled_from(list(JobStatus))),
)
def test_sources_of_matches_the_table(target: JobStatus, among: set[JobStatus] | None) -> None:
    expected = {s for (s, t) in TRANSITIONS if t is target and s is not None}
    if among is not None:
        expected &= among
    result = sources_of(target, among)
    assert set(result) == expected
    assert list(result) == sorted(result, key=lambda s: s.value)
    for source in result:
        check_transition(source, target)
