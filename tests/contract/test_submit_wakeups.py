"""CRITICAL, ``immediate()`` and due-now submissions send a wakeup, on every store backend.

The wakeups are caught by a recording coordinator that a test plugin registers through the
``ratchet_register_coordinators`` hook, exactly as a real coordinator plugin would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import gate_jobs
import pytest
from recording_coordinator import RecordingCoordinator, RecordingPlugin

from ratchet import JobPriority, Ratchet, UnserializableArgument
from ratchet.plugins import Plugins, make_plugin_manager


@pytest.fixture
def recorder(store: Any) -> Iterator[tuple[Ratchet, RecordingCoordinator]]:
    plugin = RecordingPlugin()
    app = Ratchet(
        store.url,
        allowed_modules=["gate_jobs"],
        coordinator="recording",
        plugins=Plugins(make_plugin_manager(extra=[plugin])),
        node_name="submitter-1",
        auto_migrate=False,
    )
    yield app, plugin.coordinator
    app.close()
    assert plugin.coordinator.closed


LATER = timedelta(minutes=10)


@pytest.mark.parametrize(
    ("submit", "expected"),
    [
        (lambda app: app.schedule(LATER, gate_jobs.plain, 1).submit(), None),
        (
            lambda app: (
                app.schedule(LATER, gate_jobs.plain, 1).with_priority(JobPriority.HIGH).submit()
            ),
            None,
        ),
        (
            lambda app: (
                app.schedule(LATER, gate_jobs.plain, 1).with_priority(JobPriority.CRITICAL).submit()
            ),
            JobPriority.CRITICAL,
        ),
        (
            lambda app: app.schedule(LATER, gate_jobs.plain, 1).immediate().submit(),
            JobPriority.NORMAL,
        ),
        (
            lambda app: (
                app.schedule(LATER, gate_jobs.plain, 1)
                .with_priority(JobPriority.LOW)
                .immediate()
                .submit()
            ),
            JobPriority.LOW,
        ),
        (lambda app: app.enqueue_now(gate_jobs.plain, 1), JobPriority.NORMAL),
        (lambda app: app.enqueue(gate_jobs.plain, 1).submit(), JobPriority.NORMAL),
    ],
    ids=[
        "delayed-normal",
        "delayed-high",
        "delayed-critical",
        "delayed-immediate",
        "delayed-low-immediate",
        "enqueue-now",
        "due-now",
    ],
)
def test_wakeup_follows_priority_and_immediate(
    recorder: tuple[Ratchet, RecordingCoordinator],
    submit: Callable[[Ratchet], Any],
    expected: JobPriority | None,
) -> None:
    app, coordinator = recorder
    submit(app)
    if expected is None:
        assert coordinator.sent == []
    else:
        assert [(h.priority, h.origin_node) for h in coordinator.sent] == [
            (expected, "submitter-1")
        ]


def test_bulk_submission_sends_one_wakeup_with_the_top_priority(
    recorder: tuple[Ratchet, RecordingCoordinator],
) -> None:
    app, coordinator = recorder
    app.submit_many(
        [
            app.schedule(LATER, gate_jobs.plain, 1),
            app.schedule(LATER, gate_jobs.plain, 2).with_priority(JobPriority.CRITICAL),
            app.schedule(LATER, gate_jobs.plain, 3).immediate(),
        ]
    )
    assert [h.priority for h in coordinator.sent] == [JobPriority.CRITICAL]
    assert coordinator.sent[0].jobs == 2  # the jobs claimable now: the other one is due later


def test_a_duplicate_idempotency_key_sends_no_wakeup(
    recorder: tuple[Ratchet, RecordingCoordinator],
) -> None:
    app, coordinator = recorder
    first = app.enqueue(gate_jobs.plain, 1).with_idempotency_key("hook-9").immediate().submit()
    again = app.enqueue(gate_jobs.plain, 1).with_idempotency_key("hook-9").immediate().submit()
    assert again.id == first.id and not again.inserted
    assert len(coordinator.sent) == 1


def test_a_large_bulk_submission_keeps_order_keys_and_one_wakeup(
    recorder: tuple[Ratchet, RecordingCoordinator],
) -> None:
    """More jobs than any store's insert chunk (PostgreSQL streams them while they are built)."""
    app, coordinator = recorder
    builders = [app.schedule(LATER, gate_jobs.plain, i) for i in range(1100)]
    builders[10].with_idempotency_key("bulk-1")
    builders[1050].with_idempotency_key("bulk-1")  # a later chunk: the first one wins
    builders[700].with_priority(JobPriority.CRITICAL)
    handles = app.submit_many(builders)
    assert len({h.id for h in handles}) == 1099
    assert handles[1050].id == handles[10].id and not handles[1050].inserted
    assert all(h.inserted for i, h in enumerate(handles) if i != 1050)
    assert app.store.count_by_status() == {"PENDING": 1099}
    assert [h.priority for h in coordinator.sent] == [JobPriority.CRITICAL]
    again = app.submit_many([app.enqueue(gate_jobs.plain, 0).with_idempotency_key("bulk-1")])
    assert again[0].id == handles[10].id


def test_a_large_bulk_submission_that_fails_to_build_inserts_nothing(
    recorder: tuple[Ratchet, RecordingCoordinator],
) -> None:
    app, coordinator = recorder
    builders = [app.enqueue(gate_jobs.plain, i) for i in range(1100)]
    builders.append(app.enqueue(gate_jobs.plain, object()))  # not storable, in the last chunk
    with pytest.raises(UnserializableArgument):
        app.submit_many(builders)
    assert app.store.count_by_status() == {}
    assert coordinator.sent == []
