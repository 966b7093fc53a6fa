"""``app.jobs``: keyset pages with cursors, history, health and the typed errors, on SQLite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from ratchet import JobNotFound, JobStatus, Ratchet
from ratchet.domain.query import InvalidCursor, InvalidQuery, JobQuery
from ratchet.testing import FakeClock


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock, support_path: object) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["ops_jobs"], clock=clock)
    yield app
    app.close()


def submit(app: Ratchet, clock: FakeClock, n: int, **options: object) -> list[uuid.UUID]:
    import ops_jobs

    ids = []
    for i in range(n):
        builder = app.enqueue(ops_jobs.ok, i)
        for name, value in options.items():
            builder = getattr(builder, name)(value)
        ids.append(builder.submit().id)
        clock.advance(timedelta(milliseconds=1))
    return ids


def test_cursor_pages_walk_every_job_once(app: Ratchet, clock: FakeClock) -> None:
    ids = submit(app, clock, 23)
    seen: list[uuid.UUID] = []
    cursor = None
    pages = 0
    while True:
        page = app.jobs.list(cursor=cursor, limit=5)
        seen += [job.job_id for job in page]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == ids[::-1] and pages == 5
    assert [j.job_id for j in app.jobs.iterate(page_size=4)] == ids[::-1]


def test_an_exact_last_page_has_no_cursor(app: Ratchet, clock: FakeClock) -> None:
    submit(app, clock, 4)
    page = app.jobs.list(limit=4)
    assert len(page) == 4 and page.next_cursor is None


def test_filters_by_keyword_and_cursor_bound_to_them(app: Ratchet, clock: FakeClock) -> None:
    tagged = submit(app, clock, 3, with_tags="eu")
    submit(app, clock, 2)
    page = app.jobs.list(tag="eu", status="pending", limit=2)
    assert [j.job_id for j in page] == tagged[::-1][:2]
    rest = app.jobs.list(tag="eu", status="pending", cursor=page.next_cursor, limit=2)
    assert [j.job_id for j in rest] == [tagged[0]] and rest.next_cursor is None
    with pytest.raises(InvalidCursor, match="other filters"):
        app.jobs.list(cursor=page.next_cursor)
    with pytest.raises(InvalidCursor):
        app.jobs.list(tag="eu", status="pending", cursor=page.next_cursor[:-2] + "AA")
    with pytest.raises(InvalidQuery, match="unknown filter"):
        app.jobs.list(colour="red")
    with pytest.raises(InvalidQuery, match="limit"):
        app.jobs.list(limit=5000)


def test_history_health_and_counts(app: Ratchet, clock: FakeClock) -> None:
    import ops_jobs

    bad = app.enqueue(ops_jobs.leaks).with_max_retries(1).submit().id
    submit(app, clock, 2)
    worker = app.worker(concurrency=4)
    worker.run_due()
    clock.advance(timedelta(minutes=5))
    worker.run_due()
    history = app.jobs.history(bad)
    assert history.job.status is JobStatus.FAILED
    assert [a.outcome for a in history.attempts] == ["RETRY", "DEAD"]
    assert all("ConnectionError" in (a.traceback or "") for a in history.attempts)
    counts = app.jobs.count_by_status()
    assert counts == {"SUCCEEDED": 2, "FAILED": 1}
    health = app.jobs.health(window=timedelta(minutes=10))
    assert (health.pending, health.failed, health.due_now) == (0, 1, 0)
    assert health.finished_in_window == 3
    assert app.jobs.list(statuses=(JobStatus.FAILED,)).items[0].job_id == bad
    with pytest.raises(JobNotFound):
        app.jobs.history(uuid.uuid4())
    with pytest.raises(InvalidQuery, match="window"):
        app.jobs.health(window=timedelta(0))


def test_batch_children_and_dependants(app: Ratchet, clock: FakeClock) -> None:
    import ops_jobs

    handle = app.enqueue_batch("nightly").for_each([1, 2, 3], ops_jobs.ok).submit()
    children = app.jobs.batch_children(handle.id, limit=2)
    rest = app.jobs.batch_children(handle.id, cursor=children.next_cursor, limit=2)
    assert len(children) + len(rest) == 3 and rest.next_cursor is None
    head = app.enqueue(ops_jobs.ok, 1).then(ops_jobs.ok, 2).then(ops_jobs.ok, 3).submit()
    found = app.jobs.dependants(head.id)
    assert len(found) == 2 and all(j.status is JobStatus.WAITING for j in found)
    flow = app.jobs.list(JobQuery(workflow_id=head.id))
    assert {j.job_id for j in flow} == {head.id} | {j.job_id for j in found}


def test_links_follow_a_workflow_down_with_branch_conditions(app: Ratchet) -> None:
    import ops_jobs

    from ratchet.domain.workflow import ConditionType

    head = (
        app.enqueue(ops_jobs.ok, 1)
        .then_on_success(ops_jobs.ok, 2)
        .then_on_failure(ops_jobs.ok, 3)
        .submit()
    )
    chain = app.enqueue(ops_jobs.ok, 4).then(ops_jobs.ok, 5).then(ops_jobs.ok, 6).submit()
    branches = app.jobs.links(head.id)
    assert {link.parent_id for link in branches} == {head.id}
    assert sorted(link.condition.type for link in branches if link.condition) == [
        ConditionType.FAILURE,
        ConditionType.SUCCESS,
    ]
    one_level = app.jobs.links(chain.id)
    whole = app.jobs.links(chain.id, depth=5)
    assert len(one_level) == 1 and len(whole) == 2, "depth follows the chain a level at a time"
    [step2] = [link.child_id for link in one_level]
    assert [(link.parent_id, link.condition) for link in whole] == [
        (chain.id, None),
        (step2, None),
    ]
    upward = app.jobs.links(step2)
    assert {link.parent_id for link in upward} == {chain.id, step2}, "its parent and its child"
    with pytest.raises(JobNotFound):
        app.jobs.links(uuid.uuid4())
    with pytest.raises(InvalidQuery, match="depth"):
        app.jobs.links(chain.id, depth=0)
