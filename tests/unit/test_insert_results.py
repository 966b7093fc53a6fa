"""How a submission's jobs are matched to their keys: the first job of each key goes in, the
rest answer with it, and a key held before the batch answers with its holder. Pure functions of
:mod:`ratchet.sql.hotpaths`, checked on random batches (jobs repeated, keys repeated, the same
object passed twice)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.model import NewJob, own_id
from ratchet.ids import uuid7
from ratchet.sql.hotpaths import first_of_each_key, insert_results
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import keyed_by_id, new_job

CLOCK = FakeClock(datetime(2026, 12, 4, tzinfo=UTC))
#: A pool of jobs a batch draws from: some keyed by their own ids, some sharing given keys.
POOL = [keyed_by_id(CLOCK) for _ in range(4)] + [
    new_job(CLOCK, idempotency_key=key) for key in ("a", "a", "b", "c")
]


@given(
    picks=st.lists(st.integers(0, len(POOL) - 1), max_size=20),
    held=st.sets(st.sampled_from(sorted({j.idempotency_key for j in POOL}))),
)
def test_the_first_job_of_each_key_goes_in_and_the_rest_answer_with_it(
    picks: list[int], held: set[str]
) -> None:
    batch = [POOL[i] for i in picks]
    first: dict[str, NewJob] = {}
    fresh = first_of_each_key(batch, first)
    keys = [j.idempotency_key for j in fresh]
    assert len(keys) == len(set(keys)), "one job per key"
    assert keys == list(dict.fromkeys(j.idempotency_key for j in batch)), "in batch order"
    holders = {key: uuid.uuid4() for key in held}
    results = insert_results(batch, first, holders)
    assert len(results) == len(batch)
    seen: set[str] = set()
    for job, result in zip(batch, results, strict=True):
        key = job.idempotency_key
        if key in holders:
            assert (result.job_id, result.inserted) == (holders[key], False)
        else:
            assert result.job_id == first[key].job_id
            assert result.inserted == (key not in seen), "only the key's first place goes in"
        seen.add(key)
    assert sum(r.inserted for r in results) == len({j.idempotency_key for j in batch} - held)


def test_a_later_chunk_repeating_a_key_sends_nothing_for_it() -> None:
    first: dict[str, NewJob] = {}
    a, b = new_job(CLOCK, idempotency_key="k"), new_job(CLOCK, idempotency_key="k")
    assert first_of_each_key([a], first) == [a]
    assert first_of_each_key([b, a], first) == []


def test_own_id_reads_only_a_canonical_uuid() -> None:
    job_id = uuid7()
    assert own_id(str(job_id)) == job_id
    assert keyed_by_id(CLOCK).keyed_by_id
    assert not new_job(CLOCK, idempotency_key=str(job_id)).keyed_by_id, "another job's id"
    for text in (job_id.hex, str(job_id).upper(), f"{{{job_id}}}", "order-7", ""):
        assert own_id(text) is None, text
