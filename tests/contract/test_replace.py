"""``app.replace``: what the replacement keeps of the old job, on every store backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import gate_jobs
import pytest

from ratchet import (
    BackoffPolicy,
    InvalidJobOptions,
    JobHandle,
    JobNotFound,
    JobOptions,
    JobPriority,
    JobStatus,
    Ratchet,
)
from ratchet.domain.model import JobRecord

LATER = timedelta(minutes=5)


@pytest.fixture
def app(store: Any) -> Iterator[Ratchet]:
    app = Ratchet(store.url, allowed_modules=["gate_jobs"], auto_migrate=False)
    yield app
    app.close()


def tuned(app: Ratchet) -> JobHandle:
    """A job with every option set away from its default."""
    return (
        app.schedule(LATER, gate_jobs.plain, "v1")
        .with_priority(JobPriority.HIGH)
        .with_max_retries(5)
        .with_backoff(BackoffPolicy.EXPONENTIAL, timedelta(seconds=2))
        .with_timeout(timedelta(seconds=90))
        .with_stall_timeout(timedelta(seconds=45))
        .with_tags("billing", "eu")
        .with_param("tenant", "acme")
        .with_business_key("invoice-9")
        .with_executor("threads")
        .with_resource(gate_jobs.RESOURCE)
        .submit()
    )


def options_of(rec: JobRecord) -> tuple[Any, ...]:
    return (
        rec.priority,
        rec.max_retries,
        rec.backoff,
        rec.backoff_delay,
        rec.timeout,
        rec.tags,
        dict(rec.params),
    )


def kept_of(rec: JobRecord) -> tuple[Any, ...]:
    """What a replacement always keeps."""
    return (rec.business_key, rec.executor, rec.resource_name, rec.stall_timeout)


def replaced(app: Ratchet, old: JobHandle, new: JobHandle) -> JobRecord:
    """The replacement's record, after checking the old job was superseded by it."""
    old_rec, new_rec = old.record(), new.record()
    assert old_rec is not None and new_rec is not None
    assert (old_rec.status, old_rec.superseded_by) == (JobStatus.CANCELED, new.id)
    assert new_rec.status is JobStatus.PENDING and new_rec.payload != old_rec.payload
    return new_rec


def test_without_options_the_replacement_keeps_the_old_jobs_options(app: Ratchet) -> None:
    old = tuned(app)
    new = app.replace(old.id, LATER, gate_jobs.plain, "v2")
    rec = replaced(app, old, new)
    assert options_of(rec) == (
        JobPriority.HIGH,
        5,
        BackoffPolicy.EXPONENTIAL,
        timedelta(seconds=2),
        timedelta(seconds=90),
        ("billing", "eu"),
        {"tenant": "acme"},
    )
    assert kept_of(rec) == ("invoice-9", "threads", gate_jobs.RESOURCE, timedelta(seconds=45))


def test_given_options_are_the_replacements_options(app: Ratchet) -> None:
    old = tuned(app)
    given = JobOptions(priority=JobPriority.LOW, max_retries=1, tags=("Retry-Later",))
    new = app.replace(old.id, LATER, gate_jobs.plain, "v2", options=given)
    rec = replaced(app, old, new)
    assert options_of(rec) == (
        JobPriority.LOW,
        1,
        BackoffPolicy.NONE,
        timedelta(0),
        None,
        ("retry-later",),
        {},
    ), "exactly the options given: JobOptions defaults for the rest"
    assert kept_of(rec) == ("invoice-9", "threads", gate_jobs.RESOURCE, timedelta(seconds=45))


def test_one_option_changed_the_others_kept(app: Ratchet) -> None:
    old = tuned(app)
    old_rec = old.record()
    assert old_rec is not None
    urgent = dataclasses.replace(JobOptions.from_record(old_rec), priority=JobPriority.CRITICAL)
    new = app.replace(old.id, timedelta(0), gate_jobs.plain, "v2", options=urgent)
    rec = replaced(app, old, new)
    assert options_of(rec) == (JobPriority.CRITICAL, *options_of(old_rec)[1:])
    assert kept_of(rec) == kept_of(old_rec)


def test_a_plain_job_is_replaced_by_a_plain_job(app: Ratchet) -> None:
    old = app.schedule(LATER, gate_jobs.plain, "v1").submit()
    new = app.replace(old.id, LATER, gate_jobs.plain, "v2")
    rec = replaced(app, old, new)
    assert options_of(rec) == (
        JobPriority.NORMAL,
        0,
        BackoffPolicy.NONE,
        timedelta(0),
        None,
        (),
        {},
    )
    assert kept_of(rec) == (None, None, None, None)


def test_bad_options_and_missing_jobs_change_nothing(app: Ratchet) -> None:
    old = tuned(app)
    with pytest.raises(InvalidJobOptions):
        app.replace(old.id, LATER, gate_jobs.plain, "v2", options={"priority": 4})  # type: ignore[arg-type]
    assert old.status() is JobStatus.PENDING
    assert app.cancel_job(old.id)
    with pytest.raises(JobNotFound):
        app.replace(old.id, LATER, gate_jobs.plain, "v2")
    assert [r.job_id for r in app.list_jobs()] == [old.id]
