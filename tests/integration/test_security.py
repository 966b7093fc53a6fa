"""Caller principal, authorization, payload encryption and masking through the app API, on a
real SQLite store (the stored columns are covered on every backend by the security contract)."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import security_jobs
from sqlalchemy import create_engine, select, update

from ratchet import JobStatus, Ratchet
from ratchet.domain.authorization import AuthorizationRequest, JobAction, OwnerOnly, PermitAll
from ratchet.domain.envelope import PREFIX, is_envelope
from ratchet.domain.errors import (
    ConfigurationError,
    EncryptionUnavailable,
    InvalidPrincipal,
    NotAuthorized,
)
from ratchet.domain.masking import MASK, MaskingPolicy
from ratchet.domain.model import JobFilter
from ratchet.encryption import StaticKeyProvider, generate_key
from ratchet.engine.worker import Worker
from ratchet.events import EventKind, JobEvent
from ratchet.sql.schema import job as J
from ratchet.sql.schema import job_end as END
from ratchet.testing import FakeClock

K1, K2 = generate_key(), generate_key()


def make_app(url: str, clock: FakeClock, **options: Any) -> Ratchet:
    return Ratchet(url, allowed_modules=["security_jobs"], clock=clock, **options)


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock) -> Any:
    app = make_app(sqlite_url, clock)
    yield app
    app.close()


def run_all(app: Ratchet) -> Worker:
    worker = app.worker(concurrency=10)
    worker.run_due()
    return worker


def raw_row(url: str, job_id: Any, *columns: str) -> Any:
    """Columns of a job's row, or of its end, as stored (no app, no decryption)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(
                select(*(END.c[c] if c in END.c else J.c[c] for c in columns))
                .select_from(J.outerjoin(END, END.c.job_id == J.c.job_id))
                .where(J.c.job_id == job_id)
            ).one()
    finally:
        engine.dispose()


def overwrite_payload(url: str, job_id: Any, payload: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(update(J).where(J.c.job_id == job_id).values(payload=payload))
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------- principal
def test_principal_is_captured_at_submit_and_read_by_the_job(app: Ratchet) -> None:
    with app.as_principal("alice"):
        assert app.current_principal() == "alice"
        mine = app.enqueue(security_jobs.whoami).submit()
        with app.as_principal("bob"):
            nested = app.enqueue(security_jobs.whoami).submit()
        explicit = app.enqueue(security_jobs.whoami).with_principal("svc-cron").submit()
    anonymous = app.enqueue(security_jobs.whoami).submit()
    assert app.current_principal() is None
    run_all(app)
    assert [h.result() for h in (mine, nested, explicit, anonymous)] == [
        "alice",
        "bob",
        "svc-cron",
        None,
    ]
    assert app.get_job(mine.id).caller_principal == "alice"
    assert app.get_job(anonymous.id).caller_principal is None


def test_principal_follows_flows_and_batches(app: Ratchet) -> None:
    with app.as_principal("carol"):
        chain = app.enqueue(security_jobs.whoami).then(security_jobs.whoami).submit()
        batch = app.enqueue_batch("b").for_each([1, 2], security_jobs.double).submit()
    principals = {r.caller_principal for r in app.list_jobs(JobFilter(), 20)}
    assert principals == {"carol"}
    assert app.get_job(chain.id).caller_principal == "carol"
    assert app.get_job(batch.id).caller_principal == "carol"


def test_a_principal_that_cannot_be_stored_is_refused(app: Ratchet) -> None:
    builder = app.enqueue(security_jobs.double, 1)
    for bad in ("", "x" * 256, "nul\0byte", 42):
        with pytest.raises(InvalidPrincipal), app.as_principal(bad):  # type: ignore[arg-type]
            pass
        with pytest.raises(InvalidPrincipal):
            builder.with_principal(bad)  # type: ignore[arg-type]
    handle = builder.submit()
    assert [r.caller_principal for r in app.list_jobs()] == [None]
    assert app.get_job(handle.id) is not None


# ---------------------------------------------------------------------------- authorization
class Recording:
    """A policy that refuses what ``refuse`` names and records every question."""

    def __init__(self, refuse: set[JobAction]) -> None:
        self.refuse = refuse
        self.asked: list[AuthorizationRequest] = []

    def authorize(self, request: AuthorizationRequest) -> bool:
        self.asked.append(request)
        return request.action not in self.refuse

    def filter_for_principal(self, job_filter: JobFilter, principal: str | None) -> JobFilter:
        return dataclasses.replace(job_filter, caller_principal=principal or "")


def test_refused_create_stores_nothing(sqlite_url: str, clock: FakeClock) -> None:
    policy = Recording({JobAction.CREATE})
    with make_app(sqlite_url, clock, authorization=policy) as app:
        with app.as_principal("mallory"), pytest.raises(NotAuthorized, match=r"mallory.*create"):
            app.enqueue(security_jobs.double, 1).submit()
        assert app.store.list_jobs(JobFilter(), 10) == []
        [asked] = policy.asked
        assert asked.principal == "mallory"
        assert asked.target == "security_jobs:double"


def test_operator_actions_are_asked_with_the_jobs_owner(sqlite_url: str, clock: FakeClock) -> None:
    refuse = {JobAction.CANCEL, JobAction.PAUSE, JobAction.RETRY, JobAction.DELIVER_SIGNAL}
    policy = Recording(refuse)
    with make_app(sqlite_url, clock, authorization=policy) as app:
        with app.as_principal("alice"):
            job = app.schedule(timedelta(hours=1), security_jobs.double, 2).submit()
            waiting = (
                app.enqueue(security_jobs.double, 3)
                .with_await_signal("go", timedelta(hours=1))
                .submit()
            )
        with app.as_principal("bob"):
            for call in (
                lambda: app.cancel_job(job.id),
                lambda: app.pause_job(job.id),
                lambda: app.retry_job(job.id),
                lambda: app.deliver_signal(waiting.id, "x"),
                lambda: app.deliver_signal("go", "x"),
                lambda: app.cancel_jobs_by_tag("t"),
                lambda: app.retry_jobs(),
                lambda: app.replace(job.id, timedelta(0), security_jobs.double, 4),
            ):
                with pytest.raises(NotAuthorized, match="principal 'bob'"):
                    call()
        assert app.store.get_job(job.id).status is JobStatus.PENDING
        assert app.store.get_job(waiting.id).status is JobStatus.WAITING
        by_id = [r for r in policy.asked if r.job_id == job.id]
        assert {r.action for r in by_id} == {JobAction.CANCEL, JobAction.PAUSE, JobAction.RETRY}
        assert all(r.owner == "alice" and r.principal == "bob" for r in by_id)
        by_key = [r for r in policy.asked if r.signal_key == "go"]
        assert by_key and by_key[0].job_id is None


def test_listings_and_lookups_are_narrowed_per_principal(sqlite_url: str, clock: FakeClock) -> None:
    with make_app(sqlite_url, clock, authorization=OwnerOnly(admins={"root"})) as app:
        with app.as_principal("alice"):
            a = app.enqueue(security_jobs.double, 1).submit()
        with app.as_principal("bob"):
            b = app.enqueue(security_jobs.double, 2).submit()
            assert [r.job_id for r in app.list_jobs()] == [b.id]
            with pytest.raises(NotAuthorized, match="read job"):
                app.get_job(a.id)
            with pytest.raises(NotAuthorized):
                app.cancel_job(a.id)
            assert app.cancel_job(b.id)
        assert app.list_jobs() == [], "anonymous sees nothing"
        with app.as_principal("root"):
            assert {r.job_id for r in app.list_jobs()} == {a.id, b.id}
            assert app.get_job(a.id) is not None


def test_refused_execution_dead_letters_the_job(sqlite_url: str, clock: FakeClock) -> None:
    policy = Recording({JobAction.EXECUTE})
    with make_app(sqlite_url, clock, authorization=policy) as app:
        with app.as_principal("eve"):
            handle = app.enqueue(security_jobs.double, 1).with_max_retries(3).submit()
        run_all(app)
        record = app.store.get_job(handle.id)
        assert record.status is JobStatus.FAILED, "no retry: it would be refused again"
        assert "NotAuthorized" in (record.last_error or "")
        assert "principal 'eve' may not execute" in (record.last_error or "")
        [asked] = [r for r in policy.asked if r.action is JobAction.EXECUTE]
        assert asked.principal == "eve" and asked.job_id == handle.id


def test_permit_all_is_the_default(app: Ratchet) -> None:
    assert type(app.guard.policy) is PermitAll


# ---------------------------------------------------------------------------- encryption
def keys(current: str = "k1", **extra: str) -> StaticKeyProvider:
    return StaticKeyProvider({"k1": K1, **extra}, current)


def test_arguments_and_results_are_stored_sealed(sqlite_url: str, clock: FakeClock) -> None:
    with make_app(sqlite_url, clock, key_provider=keys()) as app:
        handle = app.enqueue(security_jobs.login, "ann", password="hunter2").submit()
        payload, key_id = raw_row(sqlite_url, handle.id, "payload", "encryption_key_id")
        assert payload.startswith(PREFIX) and key_id == "k1"
        assert "hunter2" not in payload and "ann" not in payload
        run_all(app)
        assert handle.result() == {"user": "ann", "token": "token-of-ann", "length": 7}
        (result,) = raw_row(sqlite_url, handle.id, "result")
        assert is_envelope(result) and "token-of-ann" not in result
        shown = app.get_job(handle.id)
        assert json.loads(shown.payload) == {"args": ["ann"], "kwargs": {"password": MASK}}
        assert json.loads(shown.result or "") == {"user": "ann", "token": MASK, "length": 7}


def test_rotation_new_jobs_use_the_new_key_and_old_ones_still_run(
    sqlite_url: str, clock: FakeClock
) -> None:
    with make_app(sqlite_url, clock, key_provider=keys()) as app:
        old = app.enqueue(security_jobs.double, 21).submit()
    with make_app(sqlite_url, clock, key_provider=keys("k2", k2=K2)) as app:
        new = app.enqueue(security_jobs.double, 1).submit()
        assert raw_row(sqlite_url, new.id, "encryption_key_id")[0] == "k2"
        assert raw_row(sqlite_url, old.id, "encryption_key_id")[0] == "k1"
        run_all(app)
        shown = [json.loads(app.get_job(h.id).result or "") for h in (old, new)]
        assert shown == [42, 2]
        assert raw_row(sqlite_url, old.id, "result")[0].startswith(PREFIX)


def test_a_missing_key_dead_letters_the_job_and_the_worker_goes_on(
    sqlite_url: str, clock: FakeClock
) -> None:
    with make_app(sqlite_url, clock, key_provider=keys()) as app:
        lost = app.enqueue(security_jobs.double, 1).with_max_retries(5).submit()
    only_k2 = StaticKeyProvider({"k2": K2}, "k2")
    with make_app(sqlite_url, clock, key_provider=only_k2) as app:
        fine = app.enqueue(security_jobs.double, 5).submit()
        run_all(app)
        record = app.store.get_job(lost.id)
        assert record.status is JobStatus.FAILED
        assert "EncryptionKeyNotFound" in (record.last_error or "")
        assert "key 'k1'" in (record.last_error or "")
        assert fine.result() == 10
        # The reader without the key sees a note, not ciphertext or an exception.
        note = json.loads(app.get_job(lost.id).payload)
        assert note["encrypted"] is True and note["key_id"] == "k1"


def test_a_tampered_envelope_dead_letters_the_job(sqlite_url: str, clock: FakeClock) -> None:
    with make_app(sqlite_url, clock, key_provider=keys()) as app:
        handle = app.enqueue(security_jobs.double, 1).with_max_retries(5).submit()
        (payload,) = raw_row(sqlite_url, handle.id, "payload")
        doc = json.loads(payload)
        sealed = bytearray(base64.b64decode(doc["ct"]))
        sealed[0] ^= 1
        doc["ct"] = base64.b64encode(bytes(sealed)).decode()
        overwrite_payload(sqlite_url, handle.id, json.dumps(doc))
        run_all(app)
        record = app.store.get_job(handle.id)
        assert record.status is JobStatus.FAILED
        assert "TamperedEnvelope" in (record.last_error or "")


def test_a_sealed_job_without_any_key_provider_is_dead_lettered(
    sqlite_url: str, clock: FakeClock
) -> None:
    with make_app(sqlite_url, clock, key_provider=keys()) as app:
        handle = app.enqueue(security_jobs.double, 1).submit()
    with make_app(sqlite_url, clock) as app:
        run_all(app)
        error = app.store.get_job(handle.id).last_error or ""
        assert "has no key provider" in error


def test_keys_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, sqlite_url: str, clock: FakeClock
) -> None:
    monkeypatch.setenv("RATCHET_ENCRYPTION_KEYS", f"old={K1}, new={K2}")
    with make_app(sqlite_url, clock) as app:
        handle = app.enqueue(security_jobs.double, 1).submit()
        assert raw_row(sqlite_url, handle.id, "encryption_key_id")[0] == "new"
    monkeypatch.setenv("RATCHET_ENCRYPTION_KEY_ID", "nope")
    with pytest.raises(ConfigurationError, match="'nope' is not among"):
        make_app(sqlite_url, clock)
    monkeypatch.setenv("RATCHET_ENCRYPTION_KEYS", "k1")
    with pytest.raises(ConfigurationError, match="id=base64key"):
        make_app(sqlite_url, clock)


def test_bad_keys_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="32 bytes"):
        StaticKeyProvider({"k": base64.b64encode(b"short").decode()}, "k")
    with pytest.raises(ConfigurationError, match="base64"):
        StaticKeyProvider({"k": "not base64!"}, "k")
    with pytest.raises(ConfigurationError, match="key id"):
        StaticKeyProvider({"bad id\n": K1}, "bad id\n")


def test_without_cryptography_encryption_refuses_and_the_core_still_imports(
    tmp_path: Path,
) -> None:
    script = f"""
import sys
sys.modules["cryptography"] = None  # as if it were not installed
from ratchet import Ratchet
from ratchet.domain.errors import EncryptionUnavailable
from ratchet.encryption import StaticKeyProvider
app = Ratchet("sqlite:///{tmp_path / "x.db"}", allow_empty_class_policy=True)
app.close()
try:
    Ratchet("sqlite:///{tmp_path / "y.db"}", allow_empty_class_policy=True,
            key_provider=StaticKeyProvider({{"k": {K1!r}}}, "k"))
except EncryptionUnavailable as exc:
    print("refused:", exc)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert "refused: payload encryption needs the cryptography package" in out.stdout
    assert issubclass(EncryptionUnavailable, ConfigurationError)


def test_workflow_predicates_read_sealed_results(sqlite_url: str, clock: FakeClock) -> None:
    with make_app(sqlite_url, clock, key_provider=keys()) as app:
        parent = (
            app.enqueue(security_jobs.double, 21)
            .when_result(security_jobs.is_42, security_jobs.double, 1)
            .when_result(security_jobs.is_42, security_jobs.double, 2)
            .submit()
        )
        for _ in range(3):
            run_all(app)
        children = [r for r in app.store.list_jobs(JobFilter(), 10) if r.job_id != parent.id]
        assert [c.status for c in children] == [JobStatus.SUCCEEDED] * 2, "the predicate saw 42"


# ---------------------------------------------------------------------------- masking
def test_reads_and_events_are_masked(app: Ratchet) -> None:
    handle = (
        app.enqueue(security_jobs.login, "ann", password="hunter2")
        .with_param("api_token", "t0k")
        .with_param("region", "eu")
        .submit()
    )
    record = app.get_job(handle.id)
    assert json.loads(record.payload)["kwargs"] == {"password": MASK}
    assert dict(record.params) == {"api_token": MASK, "region": "eu"}
    raw = app.store.get_job(handle.id)
    assert "hunter2" in raw.payload, "stored as given (masking is for readers)"
    seen: list[JobEvent] = []
    app.add_event_listener(seen.append)
    app.emit(JobEvent(EventKind.SUBMITTED, handle.id, app.now(), data={"secret": "s", "n": 1}))
    assert seen[-1].data == {"secret": MASK, "n": 1}


def test_masking_words_are_configurable(sqlite_url: str, clock: FakeClock) -> None:
    policy = MaskingPolicy.with_words(["user"])
    with make_app(sqlite_url, clock, masking=policy) as app:
        handle = app.enqueue(security_jobs.login, "ann", password="pw").submit()
        run_all(app)
        shown = json.loads(app.get_job(handle.id).result or "")
        assert shown == {"user": MASK, "token": MASK, "length": 2}
    with make_app(sqlite_url, clock, masking=MaskingPolicy(enabled=False)) as app:
        assert json.loads(app.get_job(handle.id).result or "")["token"] == "token-of-ann"


def test_logging_is_quiet_for_plain_apps(app: Ratchet, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    handle = app.enqueue(security_jobs.double, 2).submit()
    run_all(app)
    assert handle.result() == 4
    assert not [r for r in caplog.records if r.name.startswith("ratchet")]
    assert os.environ.get("RATCHET_ENCRYPTION_KEYS") is None
