"""The scheduler API against a real SQLite store: behaviour and bad input."""

from __future__ import annotations

import gc
import http
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sample_jobs
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from ratchet import (
    ClassPolicyViolation,
    DuplicateBusinessKeyError,
    InvalidJobOptions,
    InvalidJobTarget,
    JobNotFound,
    JobPriority,
    JobStatus,
    MissingClassPolicy,
    PayloadTooLargeError,
    Ratchet,
    UnknownStoreError,
    UnserializableArgument,
    UnsubmittedJobWarning,
)
from ratchet.engine.worker import Worker
from ratchet.ports import TransactionalStore, WakeupHint
from ratchet.testing import FakeClock
from tripwire_fixtures import Tripwire


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock) -> Ratchet:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], clock=clock)
    yield app
    app.close()


def run_all(app: Ratchet) -> Worker:
    """Claim and run every due job synchronously, writing outcomes as the worker would."""
    worker = app.worker(concurrency=50)
    worker.run_due()
    return worker


def test_rich_arguments_reach_the_job_with_their_types(app: Ratchet) -> None:
    when = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    handle = app.enqueue(
        sample_jobs.echo_types,
        when,
        date(2026, 1, 2),
        UUID(int=9),
        Decimal("12.50"),
        sample_jobs.Color.BLUE,
        nested={"a": [1, 2.5, None, True]},
    ).submit()
    run_all(app)
    assert handle.status() is JobStatus.SUCCEEDED
    assert handle.result() == {
        "when": when,
        "day": date(2026, 1, 2),
        "ident": UUID(int=9),
        "amount": Decimal("12.50"),
        "color": sample_jobs.Color.BLUE,
        "nested": {"a": [1, 2.5, None, True]},
    }


def test_delayed_job_waits_for_its_time(app: Ratchet, clock: FakeClock) -> None:
    later = app.schedule(timedelta(minutes=5), sample_jobs.record, "later").submit()
    at = app.schedule(clock.now() + timedelta(minutes=1), sample_jobs.record, "at").submit()
    run_all(app)
    assert later.status() is at.status() is JobStatus.PENDING
    clock.advance(timedelta(minutes=1))
    run_all(app)
    assert (at.status(), later.status()) == (JobStatus.SUCCEEDED, JobStatus.PENDING)
    clock.advance(timedelta(minutes=4))
    run_all(app)
    assert later.status() is JobStatus.SUCCEEDED


def test_retry_with_exponential_backoff_then_dead_letter(app: Ratchet, clock: FakeClock) -> None:
    from ratchet import BackoffPolicy

    handle = (
        app.enqueue(sample_jobs.fail_always, "nope")
        .with_max_retries(2)
        .with_backoff(BackoffPolicy.EXPONENTIAL, timedelta(seconds=10))
        .submit()
    )
    run_all(app)
    rec = handle.record()
    assert (rec.status, rec.attempts, rec.scheduled_time) == (
        JobStatus.PENDING,
        1,
        clock.now() + timedelta(seconds=10),
    )
    clock.advance(10)
    run_all(app)
    assert handle.record().scheduled_time == clock.now() + timedelta(seconds=20)
    clock.advance(20)
    run_all(app)
    rec = handle.record()
    assert (rec.status, rec.attempts) == (JobStatus.FAILED, 3)
    assert rec.last_error == "RuntimeError: nope"
    assert [a.outcome for a in app.attempts(handle.id)] == ["RETRY", "RETRY", "DEAD"]


def test_do_not_retry_anywhere_in_the_mro_skips_retries(app: Ratchet) -> None:
    sub = app.enqueue(sample_jobs.fail_permanently).with_max_retries(5).submit()
    base = app.enqueue(sample_jobs.fail_fatal).with_max_retries(5).submit()
    run_all(app)
    assert (sub.status(), sub.record().attempts) == (JobStatus.FAILED, 1)
    assert (base.status(), base.record().attempts) == (JobStatus.FAILED, 1)


def test_retry_policy_is_consulted(sqlite_url: str, clock: FakeClock) -> None:
    class NoRetriesForConnectionErrors:
        def should_retry(self, attempt: int, exc: BaseException) -> bool:
            return not isinstance(exc, ConnectionError)

        def delay(self, attempt: int) -> timedelta | None:
            return timedelta(minutes=attempt)

    app = Ratchet(
        sqlite_url,
        allowed_modules=["sample_jobs"],
        clock=clock,
        retry_policy=NoRetriesForConnectionErrors(),
    )
    refused = app.enqueue(sample_jobs.fail_until, 5).with_max_retries(5).submit()
    delayed = app.enqueue(sample_jobs.fail_always, "x").with_max_retries(5).submit()
    run_all(app)
    assert refused.status() is JobStatus.FAILED
    assert delayed.record().scheduled_time == clock.now() + timedelta(minutes=1)
    app.close()


def test_priorities_order_execution(app: Ratchet) -> None:
    sample_jobs.CALLS.clear()
    for prio in (JobPriority.LOW, JobPriority.CRITICAL, JobPriority.NORMAL, JobPriority.HIGH):
        app.enqueue(sample_jobs.record, prio.name).with_priority(prio).submit()
    worker = app.worker(concurrency=1, batch_size=1)
    while jobs := worker.poll_once():
        worker.run_claimed(jobs)
    assert [v for _, v in sample_jobs.CALLS[-4:]] == ["CRITICAL", "HIGH", "NORMAL", "LOW"]


def test_bean_static_and_class_methods_run(app: Ratchet) -> None:
    greeter = sample_jobs.Greeter()
    greeter.greeting = "registered"
    app.register_bean(greeter)
    h1 = app.enqueue(sample_jobs.Greeter.greet, "ana").submit()
    h2 = app.enqueue(sample_jobs.Greeter.static_greet, "bo").submit()
    h3 = app.enqueue(sample_jobs.Greeter.class_greet, "cy").submit()
    run_all(app)
    assert [h.result() for h in (h1, h2, h3)] == ["registered ana", "static bo", "Greeter cy"]


def test_transactional_submit_with_a_session(app: Ratchet, sqlite_url: str) -> None:
    hints: list[Any] = []
    app.coordinator.add_listener(hints.append)
    engine = create_engine(sqlite_url)
    with Session(engine) as session:
        session.execute(text("CREATE TABLE orders(id INTEGER)"))
        session.commit()
        session.execute(text("INSERT INTO orders VALUES (1)"))
        rolled = app.enqueue(sample_jobs.record, "rolled back").submit(connection=session)
        assert hints == [], "no wakeup before commit"
        session.rollback()
        session.execute(text("INSERT INTO orders VALUES (2)"))
        kept = app.enqueue(sample_jobs.record, "kept").submit(connection=session)
        assert hints == []
        session.commit()
    assert len(hints) == 1, "exactly one wakeup, after the commit"
    assert app.get_job(rolled.id) is None
    assert kept.status() is JobStatus.PENDING
    engine.dispose()


class _NoCallerTransactions:
    """Delegates to a store but hides its ``TransactionalStore`` capability."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def capability(self, kind: type[Any]) -> Any:
        return None if kind is TransactionalStore else self._store.capability(kind)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_store_that_cannot_join_the_callers_transaction_refuses_connection(
    app: Ratchet,
) -> None:
    real = app.store
    app.store = _NoCallerTransactions(real)  # type: ignore[assignment]
    try:
        with real.connect() as conn, conn.begin():  # type: ignore[attr-defined]
            with pytest.raises(InvalidJobOptions, match="caller's transaction"):
                app.enqueue(sample_jobs.record, "x").submit(connection=conn)
            with pytest.raises(InvalidJobOptions, match="caller's transaction"):
                app.enqueue_batch("b").for_each([1], sample_jobs.record).submit(connection=conn)
    finally:
        app.store = real
    assert app.list_jobs() == [], "refused before anything was written"


def test_replace_cancel_pause_resume(app: Ratchet) -> None:
    old = app.enqueue(sample_jobs.record, 1).with_business_key("nightly").submit()
    with pytest.raises(DuplicateBusinessKeyError, match="nightly"):
        app.enqueue(sample_jobs.record, 2).with_business_key("nightly").submit()
    new = app.replace(old.id, timedelta(0), sample_jobs.record, 3)
    assert old.status() is JobStatus.CANCELED and new.record().business_key == "nightly"
    with pytest.raises(JobNotFound):
        app.replace(old.id, timedelta(0), sample_jobs.record, 4)
    assert app.pause_job(new.id) and new.status() is JobStatus.PAUSED
    run_all(app)
    assert new.status() is JobStatus.PAUSED
    assert app.resume_job(new.id)
    run_all(app)
    assert new.result() == 3
    assert not app.cancel_job(new.id)


def test_cancel_jobs_by_tag_and_bulk_retry(app: Ratchet) -> None:
    from ratchet import JobFilter

    tagged = [app.enqueue(sample_jobs.record, i).with_tags("Cleanup").submit() for i in range(3)]
    assert app.cancel_jobs_by_tag("cleanup") == 3
    assert {h.status() for h in tagged} == {JobStatus.CANCELED}
    dead = [app.enqueue(sample_jobs.fail_always, "x").with_tags("etl").submit() for _ in range(3)]
    run_all(app)
    heard: list[WakeupHint] = []
    app.coordinator.add_listener(heard.append)
    assert app.retry_jobs(JobFilter(tag="etl"), limit=2) == 2
    assert sorted(h.status().value for h in dead) == ["FAILED", "PENDING", "PENDING"]
    assert [hint.jobs for hint in heard] == [2]  # one wakeup announcing both jobs


def test_idempotency_key_returns_the_original(app: Ratchet) -> None:
    first = app.enqueue(sample_jobs.record, 1).with_idempotency_key("charge-7").submit()
    again = app.enqueue(sample_jobs.record, 2).with_idempotency_key("charge-7").submit()
    assert again.id == first.id and first.inserted and not again.inserted


# ---------------------------------------------------------------------------- bad input


def test_bad_targets_are_refused_at_submit(app: Ratchet) -> None:
    with pytest.raises(InvalidJobTarget, match="lambda"):
        app.enqueue(lambda: None)

    def inner() -> None: ...

    with pytest.raises(InvalidJobTarget, match="nested"):
        app.enqueue(inner)
    with pytest.raises(ClassPolicyViolation, match="allowed_modules"):
        app.enqueue(Path.home)  # importable, but its module is not allowed


def test_bad_arguments_are_refused_at_submit(app: Ratchet) -> None:
    with pytest.raises(UnserializableArgument, match="argument 0"):
        app.enqueue(sample_jobs.record, object()).submit()
    with pytest.raises(UnserializableArgument, match=r"argument 0: .*lone surrogate"):
        app.enqueue(sample_jobs.record, "bad \ud800").submit()
    with pytest.raises(UnserializableArgument, match=r"argument 'value'\['k'\]: .*surrogate"):
        app.enqueue(sample_jobs.record, value={"k": "\udcff"}).submit()
    deep: list[Any] = []
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(UnserializableArgument, match="nested more than 100 levels"):
        app.enqueue(sample_jobs.record, deep).submit()
    with pytest.raises(PayloadTooLargeError, match="100000 bytes"):
        app.enqueue(sample_jobs.record, "x" * 100_001).submit()
    assert app.list_jobs() == []


@pytest.mark.parametrize(
    ("configure", "message"),
    [
        (lambda b: b.with_max_retries(-1), "max_retries must be >= 0"),
        (lambda b: b.with_priority(9), "priority must be 0..4"),
        (lambda b: b.with_backoff("SOMETIMES"), "backoff must be one of"),
        (lambda b: b.with_timeout(timedelta(0)), "timeout must be a positive"),
        (lambda b: b.with_tags("x" * 65), "at most 64"),
        (lambda b: b.with_business_key("ünïcode"), "printable ASCII"),
        (lambda b: b.with_business_key("   "), "blank"),
        (lambda b: b.with_business_key("k" * 256), "at most 255"),
        (lambda b: b.with_param("", "v"), "non-blank"),
    ],
)
def test_bad_options_are_refused(app: Ratchet, configure: Any, message: str) -> None:
    builder = app.enqueue(sample_jobs.noop)
    with pytest.raises(InvalidJobOptions, match=message):
        configure(builder)
    builder.submit()


def test_negative_delay_is_refused(app: Ratchet) -> None:
    # The same rule, and the same words, as enqueue_many's delay.
    with pytest.raises(InvalidJobOptions, match="delay must be a non-negative timedelta, got"):
        app.schedule(timedelta(seconds=-1), sample_jobs.noop)
    with pytest.raises(InvalidJobOptions, match="timezone-aware"):
        app.schedule(datetime(2030, 1, 1), sample_jobs.noop)


def test_unknown_store_scheme_and_missing_policy(sqlite_url: str) -> None:
    with pytest.raises(UnknownStoreError, match="'oracle'"):
        Ratchet("oracle://scott@db/orcl", allowed_modules=["x"])
    with pytest.raises(MissingClassPolicy, match="allowed_modules"):
        Ratchet(sqlite_url)
    app = Ratchet(sqlite_url, allow_empty_class_policy=True)
    with pytest.raises(ClassPolicyViolation):
        app.enqueue(sample_jobs.noop)
    app.close()


def test_unknown_callable_at_run_time_dead_letters(app: Ratchet) -> None:
    handle = app.enqueue(sample_jobs.noop).with_max_retries(3).submit()
    with app.store.connect() as conn, conn.begin():
        conn.execute(text("UPDATE scheduler_job SET target = 'sample_jobs:vanished'"))
    run_all(app)
    rec = handle.record()
    assert (rec.status, rec.attempts) == (JobStatus.FAILED, 1), "no retry can fix a missing target"
    assert "UnknownJobTarget" in rec.last_error and "vanished" in rec.last_error


def test_an_enum_argument_of_a_class_the_policy_refuses_is_refused_at_submit(app: Ratchet) -> None:
    with pytest.raises(
        ClassPolicyViolation, match=r"argument 0: .*http:HTTPStatus.*allowed_modules"
    ):
        app.enqueue(sample_jobs.record, http.HTTPStatus.OK).submit()
    with pytest.raises(ClassPolicyViolation, match=r"argument 'value'"):
        app.enqueue(sample_jobs.record, value={"status": http.HTTPStatus.OK}).submit()
    builder = app.enqueue(sample_jobs.noop)
    with pytest.raises(ClassPolicyViolation, match="http:HTTPStatus"):
        builder.then(sample_jobs.record, http.HTTPStatus.OK)
    assert app.list_jobs() == []
    # A member of an allowed module's enum is stored as before.
    builder.then(sample_jobs.record, sample_jobs.Color.RED).submit()


def test_a_stored_enum_of_a_refused_module_fails_the_job_without_importing_it(
    app: Ratchet, tripwire: Tripwire
) -> None:
    handle = app.enqueue(sample_jobs.record, "x").with_max_retries(3).submit()
    tampered = (
        f'{{"args":[{{"__ratchet__":"enum","t":"{tripwire.enum_ref}","v":"red"}}],"kwargs":{{}}}}'
    )
    with app.store.connect() as conn, conn.begin():
        conn.execute(text("UPDATE scheduler_job SET payload = :p"), {"p": tampered})
    calls = len(sample_jobs.CALLS)
    run_all(app)
    rec = handle.record()
    assert (rec.status, rec.attempts) == (JobStatus.FAILED, 1), "dead-lettered at once"
    assert "ClassPolicyViolation" in rec.last_error and tripwire.enum_ref in rec.last_error
    assert not tripwire.imported, "the refused module's top-level code ran"
    assert len(sample_jobs.CALLS) == calls, "the job ran"


def test_reading_a_result_that_names_a_refused_enum_class_imports_nothing(
    app: Ratchet, tripwire: Tripwire
) -> None:
    handle = app.enqueue(sample_jobs.record, sample_jobs.Color.BLUE).submit()
    run_all(app)
    assert handle.result() is sample_jobs.Color.BLUE
    tampered = f'{{"__ratchet__":"enum","t":"{tripwire.enum_ref}","v":"red"}}'
    with app.store.connect() as conn, conn.begin():
        conn.execute(text("UPDATE scheduler_job_end SET result = :r"), {"r": tampered})
    with pytest.raises(ClassPolicyViolation, match="was not imported"):
        handle.result()
    assert not tripwire.imported, "the refused module's top-level code ran"


def test_a_result_holding_an_enum_the_policy_refuses_is_stored_but_not_read(app: Ratchet) -> None:
    handle = app.enqueue(sample_jobs.returns_http_status).submit()
    run_all(app)
    assert handle.status() is JobStatus.SUCCEEDED
    with pytest.raises(ClassPolicyViolation, match="http:HTTPStatus"):
        handle.result()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        pytest.param('{"args": ["unterminated', "not valid JSON", id="not-json"),
        pytest.param('["a", "list"]', "an object", id="not-an-object"),
        pytest.param(
            '{"args":[{"__ratchet__":"enum","t":"sample_jobs:Vanished","v":"red"}],"kwargs":{}}',
            "sample_jobs:Vanished",
            id="enum-class-gone",
        ),
        pytest.param(
            '{"args":[{"__ratchet__":"enum","t":"sample_jobs.gone:Color","v":"red"}],"kwargs":{}}',
            "sample_jobs.gone",
            id="enum-module-gone",
        ),
        pytest.param(
            '{"args":[{"__ratchet__":"enum","t":"sample_jobs:Color","v":"purple"}],"kwargs":{}}',
            "purple",
            id="enum-member-gone",
        ),
        pytest.param(
            '{"args":[{"__ratchet__":"date","v":"not a date"}],"kwargs":{}}',
            "not a date",
            id="bad-tagged-value",
        ),
    ],
)
def test_payload_that_no_longer_decodes_dead_letters_at_once(
    app: Ratchet, payload: str, reason: str
) -> None:
    handle = app.enqueue(sample_jobs.record, "x").with_max_retries(3).submit()
    with app.store.connect() as conn, conn.begin():
        conn.execute(text("UPDATE scheduler_job SET payload = :p"), {"p": payload})
    run_all(app)
    rec = handle.record()
    assert (rec.status, rec.attempts) == (JobStatus.FAILED, 1), "decoding again cannot succeed"
    assert "PayloadDecodeError" in rec.last_error and reason in rec.last_error, rec.last_error


def test_policy_change_after_submit_dead_letters(sqlite_url: str, clock: FakeClock) -> None:
    permissive = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], clock=clock)
    handle = permissive.enqueue(sample_jobs.noop).with_max_retries(2).submit()
    permissive.close()
    strict = Ratchet(sqlite_url, allowed_modules=["other_app"], clock=clock)
    run_all(strict)
    rec = strict.get_job(handle.id)
    assert rec.status is JobStatus.FAILED and "ClassPolicyViolation" in rec.last_error
    strict.close()


def test_unserialisable_result_dead_letters(app: Ratchet) -> None:
    handle = app.enqueue(sample_jobs.returns_unserialisable).with_max_retries(3).submit()
    run_all(app)
    assert (handle.status(), handle.record().attempts) == (JobStatus.FAILED, 1)


def test_unsubmitted_builder_warns(app: Ratchet) -> None:
    with pytest.warns(UnsubmittedJobWarning, match="never submitted"):
        app.enqueue(sample_jobs.noop)
        gc.collect()


def test_cli_errors_are_one_line(sqlite_url: str, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ratchet.cli", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )

    bad_app = run("worker", "no_such_module:app")
    assert bad_app.returncode != 0 and "cannot import 'no_such_module'" in bad_app.stderr
    assert "Traceback" not in bad_app.stderr
    bad_url = run("jobs", "list", "--url", "oracle://x/y")
    assert bad_url.returncode == 2 and bad_url.stderr.startswith("error: no installed plugin")
    assert "Traceback" not in bad_url.stderr
    bad_id = run("jobs", "show", "--url", sqlite_url, "not-a-uuid")
    assert bad_id.returncode == 2 and "is not a job id" in bad_id.stderr
    bad_cron = run("cron", "next", "0 0 25 * * ?")
    assert (
        bad_cron.returncode == 2
        and "hour" in bad_cron.stderr
        and "Traceback" not in bad_cron.stderr
    )


def test_cli_jobs_commands(app: Ratchet, sqlite_url: str) -> None:
    handle = app.enqueue(sample_jobs.fail_always, "x").submit()
    run_all(app)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ratchet.cli", *args, "--url", sqlite_url],
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = run("jobs", "list", "--status", "failed")
    assert str(handle.id) in listed.stdout and "FAILED" in listed.stdout
    shown = run("jobs", "show", "--json", str(handle.id))
    assert '"attempt_history"' in shown.stdout and "RuntimeError: x" in shown.stdout
    assert run("jobs", "retry", str(handle.id)).returncode == 0
    assert handle.status() is JobStatus.PENDING
    assert run("jobs", "cancel", str(handle.id)).returncode == 0
    assert handle.status() is JobStatus.CANCELED
    assert run("jobs", "cancel", str(handle.id)).returncode == 1


def test_written_outcomes_wake_the_poller_after_a_short_claim_but_not_after_an_empty_one(
    app: Ratchet,
) -> None:
    """A claim may come back short while jobs still wait (another node held the rows it
    skipped): the slots its outcomes free must wake the poller. After a poll that found
    nothing, a write must not (that would poll an empty queue once per batch)."""
    app.submit_many([app.enqueue(sample_jobs.noop) for _ in range(3)])
    worker = app.worker(concurrency=10)  # wants 10, gets 3

    def run_and_write(jobs: list[Any]) -> bool:
        """Run ``jobs`` as slots do, then write their outcomes; whether the poller was woken."""
        worker.producer.take_wake()
        for job in jobs:
            worker.runner.run(job)
        assert not worker.producer.take_wake(), "a slot with an outcome to write is not free"
        worker.completer.flush()
        return worker.producer.take_wake()

    claimed = worker.poll_once()
    assert len(claimed) == 3
    assert run_and_write(claimed), "a short claim's freed slots wake the poller"

    assert worker.poll_once() == []
    app.submit_many([app.enqueue(sample_jobs.noop)])
    claimed = worker.poll_once()
    assert worker.poll_once() == []  # the queue is empty now
    assert not run_and_write(claimed), "after an empty poll a write does not wake the poller"
