"""Text in job arguments and options: what every store keeps exactly, and what every store
refuses alike.

PostgreSQL cannot hold U+0000 in ``text`` or ``jsonb``, and no database stores a lone surrogate
as UTF-8. Arguments are JSON, which stores NUL escaped; option strings (tags, params, names,
keys) are stored as they are, so those two are refused with ``InvalidJobOptions`` before the
store is reached, and every backend answers the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sample_jobs
from sqlalchemy import text

from ratchet import (
    InvalidJobOptions,
    JobFilter,
    JobOptions,
    JobStatus,
    Ratchet,
    UnserializableArgument,
    WorkflowCondition,
)
from ratchet.serialization import decode_payload

#: Text every store must keep exactly: NUL (stored escaped as JSON's \u0000), accents, CJK,
#: characters outside the Basic Multilingual Plane (4 bytes in UTF-8), in values and keys.
TEXTS: list[Any] = [
    "a\x00b",
    "\x00",
    "é中文🎉",
    {"k\x00é": ["\x00", "\U0001f600", "ß"]},
]


@pytest.fixture
def app(store: Any) -> Iterator[Ratchet]:
    app = Ratchet(store.url, allowed_modules=["sample_jobs"], auto_migrate=False)
    yield app
    app.close()


def run_all(app: Ratchet) -> None:
    worker = app.worker(concurrency=10)
    while jobs := worker.poll_once():
        worker.run_claimed(jobs)


def test_nul_and_non_ascii_text_in_arguments_round_trips(app: Ratchet) -> None:
    one = app.enqueue(sample_jobs.record, TEXTS).submit()
    many = app.submit_many([app.enqueue(sample_jobs.record, [t, i]) for i, t in enumerate(TEXTS)])
    expected = {
        one.id: TEXTS,
        **{h.id: [t, i] for i, (h, t) in enumerate(zip(many, TEXTS, strict=True))},
    }
    for job_id, value in expected.items():
        payload = app.get_job(job_id).payload
        assert decode_payload(payload, app.enums) == ([value], {})
    run_all(app)
    for handle in (one, *many):
        assert handle.status() is JobStatus.SUCCEEDED and handle.result() == expected[handle.id]


@pytest.mark.parametrize(
    "argument",
    [pytest.param("bad \ud800", id="lone-surrogate"), pytest.param({"\udcff": 1}, id="in-a-key")],
)
def test_lone_surrogates_in_arguments_are_refused_alike(app: Ratchet, argument: Any) -> None:
    with pytest.raises(UnserializableArgument, match="lone surrogate"):
        app.enqueue(sample_jobs.record, argument).submit()
    with pytest.raises(UnserializableArgument, match="lone surrogate"):
        app.submit_many(
            [app.enqueue(sample_jobs.record, 1), app.enqueue(sample_jobs.record, argument)]
        )
    assert app.list_jobs() == []


#: Characters no store can hold in an option string (NUL, a lone surrogate), and valid text
#: every store must keep (accents, CJK, a 4-byte emoji).
BAD = [pytest.param("a\x00b", id="nul"), pytest.param("a\ud800", id="lone-surrogate")]
GOOD = "Café-東京-🎉"

JobOption = Callable[[Any, str], Any]

#: Each applies a string to a job builder, the way a user passes an option.
JOB_OPTIONS: list[Any] = [
    pytest.param(lambda b, s: b.with_tags("ok", s), id="tag"),
    pytest.param(lambda b, s: b.with_param("tenant", s), id="param-value"),
    pytest.param(lambda b, s: b.with_param(s, "v"), id="param-key"),
    pytest.param(lambda b, s: b.with_options(JobOptions(tags=(s,))), id="options-tag"),
    pytest.param(lambda b, s: b.with_options(JobOptions(params={"k": s})), id="options-param"),
    pytest.param(lambda b, s: b.with_executor(s), id="executor"),
    pytest.param(lambda b, s: b.with_business_key(s), id="business-key"),
    pytest.param(lambda b, s: b.with_idempotency_key(s), id="idempotency-key"),
    pytest.param(lambda b, s: b.with_resource(s), id="resource"),
    pytest.param(lambda b, s: b.with_await_signal(s, timedelta(hours=1)), id="signal-key"),
    pytest.param(
        lambda b, s: b.branch(WorkflowCondition.success(), sample_jobs.noop, description=s),
        id="branch-description",
    ),
]


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("option", JOB_OPTIONS)
def test_job_option_strings_no_store_can_hold_are_refused_alike(
    app: Ratchet, option: JobOption, bad: str
) -> None:
    builder = app.enqueue(sample_jobs.noop)
    with pytest.raises(InvalidJobOptions) as info:
        option(builder, bad).submit()
    str(info.value).encode()  # the message names the string storably
    builder.submit()  # the refused option was not applied
    [job] = app.list_jobs()
    assert (job.tags, job.params, job.business_key) == ((), {}, None)


def test_non_ascii_option_text_is_kept_by_every_store(app: Ratchet) -> None:
    handle = (
        app.enqueue(sample_jobs.noop)
        .with_tags(GOOD, "ünïcode")
        .with_param(GOOD, GOOD)
        .with_options(JobOptions(params={"ключ": "значение"}))
        .submit()
    )
    job = app.get_job(handle.id)
    assert job.tags == (GOOD.lower(), "ünïcode")
    assert job.params == {GOOD: GOOD, "ключ": "значение"}
    assert [j.job_id for j in app.list_jobs(JobFilter(tag=GOOD.upper()))] == [handle.id]
    assert app.cancel_jobs_by_tag(GOOD) == 1
    app.enqueue(sample_jobs.noop).branch(
        WorkflowCondition.success(), sample_jobs.noop, description=GOOD
    ).submit()
    with app.store.connect() as conn:
        stored = conn.execute(text("SELECT description FROM scheduler_workflow_condition"))
        assert stored.scalars().all() == [GOOD]


def test_a_branch_description_longer_than_its_column_is_refused_alike(app: Ratchet) -> None:
    builder = app.enqueue(sample_jobs.noop)
    with pytest.raises(InvalidJobOptions, match="at most 255"):
        builder.branch(WorkflowCondition.success(), sample_jobs.noop, description="d" * 256)
    builder.branch(WorkflowCondition.success(), sample_jobs.noop, description="é" * 255).submit()


@pytest.mark.parametrize("bad", BAD)
def test_batch_and_recurring_strings_no_store_can_hold_are_refused_alike(
    app: Ratchet, bad: str
) -> None:
    with pytest.raises(InvalidJobOptions):
        app.enqueue_batch(bad).for_each([1], sample_jobs.record).submit()
    with pytest.raises(InvalidJobOptions):
        app.enqueue_batch("b").with_tags(bad).for_each([1], sample_jobs.record).submit()
    recurring = app.schedule_recurring_utc("0 0 * * * ?", sample_jobs.noop)
    for option in (
        lambda r: r.with_name(bad),
        lambda r: r.with_tags(bad),
        lambda r: r.with_business_key(bad),
        lambda r: r.with_options(JobOptions(params={"k": bad})),
    ):
        with pytest.raises(InvalidJobOptions):
            option(recurring).submit()
    with pytest.raises(InvalidJobOptions):
        app.recurring("0 0 * * * ?", name=bad)
    with pytest.raises(InvalidJobOptions):
        app.recurring("0 0 * * * ?", tags=[bad])
    recurring.submit()
    assert len(app.list_recurring()) == 1 and app.list_jobs() == []


@pytest.mark.parametrize("bad", BAD)
def test_lookups_by_strings_no_store_can_hold_are_refused_alike(app: Ratchet, bad: str) -> None:
    app.enqueue(sample_jobs.noop).with_tags("t").submit()
    for lookup in (
        lambda: app.cancel_jobs_by_tag(bad),
        lambda: app.list_jobs(JobFilter(tag=bad)),
        lambda: app.list_jobs(JobFilter(target=bad)),
        lambda: app.retry_jobs(JobFilter(tag=bad), 10),
        lambda: app.list_recurring(tag=bad),
        lambda: app.find_recurring(bad),
        lambda: app.pause_recurring(bad),
        lambda: app.deliver_signal(bad),
    ):
        with pytest.raises(InvalidJobOptions):
            lookup()
    assert len(app.list_jobs()) == 1
