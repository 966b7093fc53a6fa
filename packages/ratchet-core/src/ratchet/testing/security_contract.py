"""Conformance suite of what the store keeps for security (docs/security.md): the caller
principal of each job, and the key id of its encrypted arguments (the
:class:`~ratchet.ports.EncryptionKeyStore` capability).

Subclass :class:`SecurityStoreContract` where the ``store`` and ``clock`` fixtures exist (as for
:class:`~ratchet.testing.store_contract.StoreContract`). A store without the key capability
skips those tests as N/A. The stored envelopes here are well formed but hold random bytes: the
store never decrypts, it only records which key an envelope names.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.envelope import ALGORITHM, ENVELOPE_VERSION, Envelope
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import ClaimedJob, JobFilter, NewJob, OutcomeKind
from ratchet.ports import EncryptionKeyStore, KeyUsage
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, new_job, outcome

#: A principal that needs the whole column and more than ASCII.
LONG_PRINCIPAL = "ü" * 200 + "x" * 55


def sealed_payload(key_id: str) -> str:
    """An envelope naming ``key_id`` (random content: the store does not decrypt)."""
    return Envelope(ENVELOPE_VERSION, key_id, ALGORITHM, os.urandom(12), os.urandom(40)).to_text()


class SecurityStoreContract:
    """Principals are stored once and read back by every path; key ids are recorded and
    counted. Needs ``store`` and ``clock``."""

    @pytest.fixture
    def keys(self, store: Any) -> EncryptionKeyStore:
        cap = store.capability(EncryptionKeyStore)
        if cap is None:
            pytest.skip("N/A: the store has no EncryptionKeyStore capability")
        return cap  # type: ignore[no-any-return]

    def claim_all(self, store: Any, clock: FakeClock, n: int) -> list[ClaimedJob]:
        claimed: list[ClaimedJob] = store.claim(NODE, n, now=clock.now(), boost_interval=BOOST)
        assert len(claimed) == n
        return claimed

    # ------------------------------------------------------------------ principal
    def test_principal_is_read_back_by_lookup_listing_and_claim(
        self, store: Any, clock: FakeClock
    ) -> None:
        alice = new_job(clock, caller_principal="alice")
        anonymous = new_job(clock)
        long = new_job(clock, caller_principal=LONG_PRINCIPAL)
        store.insert_jobs([alice, anonymous, long], now=clock.now())
        assert store.get_job(alice.job_id).caller_principal == "alice"
        assert store.get_job(anonymous.job_id).caller_principal is None
        assert store.get_job(long.job_id).caller_principal == LONG_PRINCIPAL
        listed = {r.job_id: r.caller_principal for r in store.list_jobs(JobFilter(), 10)}
        assert listed == {
            alice.job_id: "alice",
            anonymous.job_id: None,
            long.job_id: LONG_PRINCIPAL,
        }
        claimed = {c.job_id: c.caller_principal for c in self.claim_all(store, clock, 3)}
        assert claimed == listed

    def test_principal_survives_the_jobs_end(self, store: Any, clock: FakeClock) -> None:
        job = new_job(clock, caller_principal="svc-billing")
        store.insert_jobs([job], now=clock.now())
        [claimed] = self.claim_all(store, clock, 1)
        write = store.record_outcomes(
            NODE, [outcome(claimed, OutcomeKind.SUCCEEDED, clock)], now=clock.now()
        )
        assert write.fenced == ()
        record = store.get_job(job.job_id)
        assert record.status is JobStatus.SUCCEEDED
        assert record.caller_principal == "svc-billing"

    def test_listing_filters_by_principal_exactly(self, store: Any, clock: FakeClock) -> None:
        jobs = [
            new_job(clock, caller_principal="alice"),
            new_job(clock, caller_principal="Alice"),
            new_job(clock, caller_principal="alice "),
            new_job(clock, caller_principal="bob"),
            new_job(clock),
        ]
        store.insert_jobs(jobs, now=clock.now())

        def ids(principal: str | None) -> set[Any]:
            flt = JobFilter(caller_principal=principal)
            return {r.job_id for r in store.list_jobs(flt, 10)}

        assert ids("alice") == {jobs[0].job_id}, "case, accents and padding count"
        assert ids("Alice") == {jobs[1].job_id}
        assert ids("bob") == {jobs[3].job_id}
        assert ids("") == set(), "the empty principal matches no job"
        assert ids(None) == {j.job_id for j in jobs}

    def test_bulk_retry_is_narrowed_by_principal(self, store: Any, clock: FakeClock) -> None:
        jobs = [
            new_job(clock, caller_principal="alice", max_retries=0),
            new_job(clock, caller_principal="bob", max_retries=0),
        ]
        store.insert_jobs(jobs, now=clock.now())
        claimed = self.claim_all(store, clock, 2)
        dead = [outcome(c, OutcomeKind.DEAD, clock, error="boom") for c in claimed]
        assert store.record_outcomes(NODE, dead, now=clock.now()).fenced == ()
        count = store.retry_jobs(JobFilter(caller_principal="alice"), 10, now=clock.now())
        assert count == 1
        assert store.get_job(jobs[0].job_id).status is JobStatus.PENDING
        assert store.get_job(jobs[1].job_id).status is JobStatus.FAILED

    def test_a_replacement_keeps_its_own_principal(self, store: Any, clock: FakeClock) -> None:
        old = new_job(clock, caller_principal="alice")
        store.insert_jobs([old], now=clock.now())
        new = new_job(clock, caller_principal="bob")
        assert store.replace_job(old.job_id, new, now=clock.now()).value
        assert store.get_job(old.job_id).caller_principal == "alice"
        assert store.get_job(new.job_id).caller_principal == "bob"

    # ------------------------------------------------------------------ key ids
    def test_key_id_is_recorded_from_the_envelope(self, store: Any, clock: FakeClock) -> None:
        sealed = new_job(clock, payload=sealed_payload("2026-12"))
        plain = new_job(clock)
        store.insert_jobs([sealed, plain], now=clock.now())
        assert store.get_job(sealed.job_id).encryption_key_id == "2026-12"
        assert store.get_job(plain.job_id).encryption_key_id is None
        assert store.get_job(sealed.job_id).payload == sealed.payload, "stored as given"
        [claimed] = [c for c in self.claim_all(store, clock, 2) if c.job_id == sealed.job_id]
        assert claimed.payload == sealed.payload

    def test_key_usage_counts_live_and_all_jobs_per_key(
        self, store: Any, keys: EncryptionKeyStore, clock: FakeClock
    ) -> None:
        assert keys.key_usage() == []
        old = [new_job(clock, payload=sealed_payload("k1")) for _ in range(3)]
        new = [
            new_job(
                clock, payload=sealed_payload("k2"), scheduled_time=clock.now() + timedelta(hours=1)
            )
        ]
        plain = [new_job(clock, scheduled_time=clock.now() + timedelta(hours=1))]
        store.insert_jobs(old + new + plain, now=clock.now())
        assert keys.key_usage() == [
            KeyUsage(None, 1, 1),
            KeyUsage("k1", 3, 3),
            KeyUsage("k2", 1, 1),
        ]
        # Two k1 jobs end: they no longer need the key to run, but their rows still hold it.
        claimed = self.claim_all(store, clock, 3)
        done = [outcome(c, OutcomeKind.SUCCEEDED, clock) for c in claimed[:2]]
        assert store.record_outcomes(NODE, done, now=clock.now()).fenced == ()
        assert keys.key_usage() == [
            KeyUsage(None, 1, 1),
            KeyUsage("k1", 1, 3),
            KeyUsage("k2", 1, 1),
        ]
        ended = {c.job_id for c in claimed[:2]}
        listed = keys.jobs_on_key("k1", 10)
        assert set(listed) == {j.job_id for j in old}
        assert listed[0] not in ended, "live jobs first"
        assert len(keys.jobs_on_key("k1", 2)) == 2
        assert keys.jobs_on_key("gone", 10) == []

    def test_key_ids_are_exact(
        self, store: Any, keys: EncryptionKeyStore, clock: FakeClock
    ) -> None:
        jobs: list[NewJob] = [
            new_job(clock, payload=sealed_payload("Key")),
            new_job(clock, payload=sealed_payload("key")),
        ]
        store.insert_jobs(jobs, now=clock.now())
        assert [u.key_id for u in keys.key_usage()] == ["Key", "key"]
        assert keys.jobs_on_key("key", 10) == [jobs[1].job_id]
