"""``app.enqueue_many``: many calls of one function as jobs in one transaction, on every backend.

600 calls are more than PostgreSQL's streaming chunk (250), so its pipelined insert is covered
too: a refused call in a later chunk must leave nothing stored there either.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import gate_jobs
import pytest
import signature_jobs as sj
from recording_coordinator import RecordingPlugin

from ratchet import (
    ClassPolicyViolation,
    InvalidJobArguments,
    InvalidJobOptions,
    JobFilter,
    JobOptions,
    JobPriority,
    JobStatus,
    PayloadTooLargeError,
    Ratchet,
    UnserializableArgument,
)
from ratchet.events import EventKind, JobEvent
from ratchet.plugins import Plugins, make_plugin_manager

COUNT = 600


@pytest.fixture
def plugin() -> RecordingPlugin:
    return RecordingPlugin()


@pytest.fixture
def app(store: Any, plugin: RecordingPlugin) -> Iterator[Ratchet]:
    app = Ratchet(
        store.url,
        allowed_modules=["gate_jobs", "signature_jobs"],
        coordinator="recording",
        plugins=Plugins(make_plugin_manager(extra=[plugin])),
        auto_migrate=False,
        max_payload_bytes=200,
    )
    yield app
    app.close()


def stored(app: Ratchet) -> int:
    return len(app.list_jobs(JobFilter(), limit=1000))


def test_each_call_becomes_a_job_with_the_options_in_order(
    app: Ratchet, plugin: RecordingPlugin
) -> None:
    events: list[JobEvent] = []
    app.add_event_listener(events.append)
    options = JobOptions(
        priority=JobPriority.HIGH,
        max_retries=2,
        timeout=timedelta(seconds=30),
        tags=("import", "nightly"),
        params={"source": "csv"},
    )
    handles = app.enqueue_many(sj.two, [(i, i + 1) for i in range(COUNT)], options)

    assert len(handles) == COUNT
    assert len({h.id for h in handles}) == COUNT
    assert all(h.inserted for h in handles)
    for place in (0, 249, 250, 599):
        record = app.get_job(handles[place].id)
        assert record is not None
        assert json.loads(record.payload)["args"] == [place, place + 1]
        assert record.target == "signature_jobs:two"
        assert record.status is JobStatus.PENDING
        assert (record.priority, record.max_retries) == (JobPriority.HIGH, 2)
        assert record.timeout == timedelta(seconds=30)
        assert record.tags == ("import", "nightly")
        assert dict(record.params) == {"source": "csv"}
        assert record.idempotency_key == str(record.job_id)
        assert record.scheduled_time == record.created_at
    assert stored(app) == COUNT
    # Due now: one wakeup for all of them, at their priority; an event per job.
    assert [(h.priority, h.jobs) for h in plugin.coordinator.sent] == [(JobPriority.HIGH, COUNT)]
    submitted = [e.job_id for e in events if e.kind is EventKind.SUBMITTED]
    assert submitted == [h.id for h in handles]


def test_calls_may_come_from_a_generator(app: Ratchet) -> None:
    handles = app.enqueue_many(gate_jobs.plain, ((i,) for i in range(3)))
    payloads = [app.get_job(h.id).payload for h in handles]  # type: ignore[union-attr]
    assert [json.loads(p)["args"] for p in payloads] == [[0], [1], [2]]


def test_keyword_calls_a_delay_and_no_wakeup_for_jobs_due_later(
    app: Ratchet, plugin: RecordingPlugin
) -> None:
    handles = app.enqueue_many(
        sj.keyword_only,
        [{"when": "now"}, {"when": "soon", "where": "there"}],
        delay=timedelta(hours=1),
    )
    first, second = (app.get_job(h.id) for h in handles)
    assert first is not None and second is not None
    assert json.loads(second.payload)["kwargs"] == {"when": "soon", "where": "there"}
    assert first.scheduled_time is not None
    assert first.scheduled_time - first.created_at == timedelta(hours=1)
    assert plugin.coordinator.sent == []


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ((1, 2, 3), InvalidJobArguments, "call 450 of enqueue_many: signature_jobs:two cannot"),
        ({"a": 1, "c": 2}, InvalidJobArguments, "call 450 of enqueue_many: signature_jobs:two"),
        (
            7,
            InvalidJobArguments,
            "call 450 of enqueue_many has type int; give each job's arguments",
        ),
        ((1, object()), UnserializableArgument, "call 450 of enqueue_many: "),
        ((1, "x" * 300), PayloadTooLargeError, "call 450 of enqueue_many: job arguments are"),
    ],
)
def test_a_refused_call_names_its_place_and_nothing_is_stored(
    app: Ratchet, plugin: RecordingPlugin, bad: Any, error: type[Exception], message: str
) -> None:
    calls: list[Any] = [(i, i) for i in range(COUNT)]
    calls[450] = bad
    with pytest.raises(error) as raised:
        app.enqueue_many(sj.two, calls)
    assert message in str(raised.value)
    assert stored(app) == 0
    assert plugin.coordinator.sent == []


def test_the_target_and_options_are_checked_before_any_call(app: Ratchet) -> None:
    with pytest.raises(ClassPolicyViolation):
        app.enqueue_many(json.dumps, [("x",)])
    with pytest.raises(InvalidJobOptions, match="delay must be a non-negative timedelta"):
        app.enqueue_many(gate_jobs.plain, [(1,)], delay=timedelta(seconds=-1))
    with pytest.raises(InvalidJobOptions, match="max_retries must be >= 0"):
        app.enqueue_many(gate_jobs.plain, [(1,)], JobOptions(max_retries=-1))
    assert app.enqueue_many(gate_jobs.plain, []) == []
    assert stored(app) == 0


def test_jobs_join_the_callers_transaction(app: Ratchet, store: Any) -> None:
    engine = store.engine
    with engine.connect() as connection:
        transaction = connection.begin()
        handles = app.enqueue_many(gate_jobs.plain, [(1,), (2,)], connection=connection)
        transaction.rollback()
    assert all(app.get_job(h.id) is None for h in handles)
    with engine.begin() as connection:
        handles = app.enqueue_many(gate_jobs.plain, [(1,), (2,)], connection=connection)
    assert [app.get_job(h.id) is not None for h in handles] == [True, True]
