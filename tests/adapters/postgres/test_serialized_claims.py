"""Claims that take turns: each PostgreSQL claim first takes the claim lock, so it starts
after the claim before it committed and never comes back empty because others held its
window of candidates. Direct and through PgBouncer (transaction pooling), and the switch that
turns it off."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from pg_fixtures import libpq_url
from ratchet import Ratchet
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.model import ClaimedJob
from ratchet.testing import wait_until
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import new_job
from ratchet_postgres import PostgresStore
from ratchet_postgres.store import (
    CANDIDATES_PER_CLAIMED,
    CLAIM_LOCK_KEY,
    CONTENTION_MARGIN,
    split_serialize_claims,
)

pytestmark = pytest.mark.postgres

BOOST = timedelta(minutes=15)
WANT = 5
#: The claim's window of candidates for a claim of WANT jobs (one priority level).
WINDOW = CANDIDATES_PER_CLAIMED * WANT + CONTENTION_MARGIN
BEYOND = 8


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def queue_jobs(store: PostgresStore, clock: FakeClock) -> list[str]:
    """WINDOW + BEYOND due jobs, one per millisecond, oldest first: their ids as text."""
    jobs = []
    for _ in range(WINDOW + BEYOND):
        jobs.append(new_job(clock))
        clock.advance(timedelta(milliseconds=1))
    store.insert_jobs(jobs, now=clock.now())
    return [str(j.job_id) for j in jobs]


class ClaimInFlight:
    """Another node's claim, not yet committed: it holds the claim lock and has taken the
    oldest WINDOW jobs (their rows updated and locked until :meth:`commit`)."""

    def __init__(self, direct_url: str, *, with_lock: bool) -> None:
        self.conn = psycopg.connect(libpq_url(direct_url))
        if with_lock:
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (CLAIM_LOCK_KEY,))
        rows = self.conn.execute(
            "UPDATE scheduler_job_queue SET status = 'RUNNING', picked_by = 'other',"
            " epoch = epoch + 1 WHERE job_id IN (SELECT job_id FROM scheduler_job_queue"
            " WHERE status = 'PENDING' ORDER BY scheduled_time LIMIT %s) RETURNING job_id",
            (WINDOW,),
        ).fetchall()
        self.taken = {str(r[0]) for r in rows}

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


def waiting_for_claim_lock(direct_url: str) -> bool:
    """Whether some session waits for the claim lock."""
    with psycopg.connect(libpq_url(direct_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND ((classid::bigint << 32) | objid::bigint) = %s",
            (CLAIM_LOCK_KEY,),
        ).fetchone()
    return row is not None and row[0] > 0


@pytest.fixture(params=["direct", "pgbouncer"])
def store_url(request: pytest.FixtureRequest, postgres_store_url: str) -> str:
    """The test database, directly or through PgBouncer in transaction pooling (where the
    claim runs through a cursor in a transaction of its own, not as a prepared pipeline)."""
    if request.param == "direct":
        return postgres_store_url
    url: str = request.getfixturevalue("pgbouncer_store_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(store_url)
    yield s
    s.close()


def test_a_claim_waits_for_the_claim_in_flight_and_takes_the_jobs_after_it(
    store: PostgresStore, postgres_store_url: str, clock: FakeClock
) -> None:
    ids = queue_jobs(store, clock)
    other = ClaimInFlight(postgres_store_url, with_lock=True)
    got: list[list[ClaimedJob]] = []
    errors: list[BaseException] = []

    def claim() -> None:
        try:
            got.append(store.claim("n1", WANT, now=clock.now(), boost_interval=BOOST))
        except BaseException as exc:
            errors.append(exc)

    claimer = threading.Thread(target=claim)
    try:
        claimer.start()
        assert wait_until(lambda: waiting_for_claim_lock(postgres_store_url), 30)
        assert got == [], "the claim ran while the claim in flight held the lock"
        other.commit()
        claimer.join(timeout=30)
    finally:
        other.close()
    assert errors == [] and not claimer.is_alive()
    [claimed] = got
    # Not one of the jobs the other claim took, and a full batch: the oldest after them.
    assert [str(c.job_id) for c in claimed] == ids[WINDOW : WINDOW + WANT]
    assert other.taken == set(ids[:WINDOW])


def test_without_the_lock_a_claim_behind_a_held_window_comes_back_empty(
    postgres_store_url: str, clock: FakeClock
) -> None:
    """What the lock is for: racing claims skip each other's rows, and a claim whose whole
    window is held by a claim in flight finds nothing while jobs wait beyond it."""
    store = PostgresStore(postgres_store_url, serialize_claims=False)
    other: ClaimInFlight | None = None
    try:
        ids = queue_jobs(store, clock)
        other = ClaimInFlight(postgres_store_url, with_lock=False)
        assert store.claim("n1", WANT, now=clock.now(), boost_interval=BOOST) == []
        other.commit()
        claimed = store.claim("n1", WANT, now=clock.now(), boost_interval=BOOST)
        assert [str(c.job_id) for c in claimed] == ids[WINDOW : WINDOW + WANT]
    finally:
        if other is not None:
            other.close()
        store.close()


def test_the_switch_in_the_url_and_the_argument(postgres_store_url: str) -> None:
    sep = "&" if "?" in postgres_store_url else "?"
    store = PostgresStore(f"{postgres_store_url}{sep}serialize_claims=off")
    try:
        assert store.pg_claim.serialized is False
        assert "serialize_claims" not in str(store.engine.url)
        assert split_serialize_claims(store.url)[1] is False  # reopening keeps the switch
    finally:
        store.close()
    store = PostgresStore(f"{postgres_store_url}{sep}serialize_claims=off", serialize_claims=True)
    try:
        assert store.pg_claim.serialized is True  # the argument wins
    finally:
        store.close()
    store = PostgresStore(postgres_store_url)
    try:
        assert store.pg_claim.serialized is True  # on by default
    finally:
        store.close()


def test_the_postgres_coordinator_listens_from_a_store_url_with_the_switch(
    postgres_store_url: str,
) -> None:
    """The app hands its store's URL to the ``postgres`` coordinator: libpq refuses a query
    parameter it does not know, so the coordinator leaves the store's switch out."""
    sep = "&" if "?" in postgres_store_url else "?"
    app = Ratchet(
        f"{postgres_store_url}{sep}serialize_claims=off",
        coordinator="postgres",
        allowed_modules=["pg_jobs"],
    )
    try:
        assert app.store.pg_claim.serialized is False  # type: ignore[attr-defined]
        assert app.coordinator.wait_connected(10), app.coordinator.state
    finally:
        app.close()


@pytest.mark.parametrize(("value", "expected"), [("on", True), ("TRUE", True), ("0", False)])
def test_switch_values(value: str, expected: bool) -> None:
    url, serialized = split_serialize_claims(
        f"postgresql+psycopg://u@h/db?serialize_claims={value}&sslmode=disable"
    )
    assert serialized is expected and url == "postgresql+psycopg://u@h/db?sslmode=disable"


def test_an_unknown_value_is_refused_naming_the_parameter() -> None:
    with pytest.raises(ConfigurationError, match="serialize_claims=on"):
        split_serialize_claims("postgresql+psycopg://u@h/db?serialize_claims=sometimes")
