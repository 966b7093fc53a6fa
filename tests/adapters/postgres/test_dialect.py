"""The PostgreSQL dialect against a real server: error classification, URLs, plugin wiring."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from ratchet import DuplicateBusinessKeyError, Ratchet, StoreUnavailable
from ratchet.domain.lifecycle import JobStatus
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.sql.dialect import ErrorKind
from ratchet.sql.pool import has_socket_check, ping_when_idle
from ratchet.testing import wait_until
from ratchet.testing.clock import FakeClock
from ratchet.testing.servers import free_port
from ratchet.testing.store_contract import keyed_by_id, new_job
from ratchet_postgres import PostgresDialect, PostgresStore, normalize_url
from ratchet_postgres.dialect import JOB_ID_CONSTRAINTS
from ratchet_postgres.plugin import make_postgres_coordinator

pytestmark = pytest.mark.postgres

DIALECT = PostgresDialect()


@pytest.fixture
def engine(postgres_store_url: str) -> Iterator[Engine]:
    eng = create_engine(postgres_store_url, **DIALECT.engine_kwargs(postgres_store_url))
    yield eng
    eng.dispose()


@pytest.fixture
def store(postgres_store_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(postgres_store_url)
    yield s
    s.close()


def error_of(engine: Engine, *statements: str) -> DBAPIError:
    with pytest.raises(DBAPIError) as info, engine.begin() as conn:
        for stmt in statements:
            conn.execute(text(stmt))
    return info.value


# ---------------------------------------------------------------------- classification
def test_duplicate_idempotency_key_is_classified(engine: Engine) -> None:
    row = "INSERT INTO scheduler_idempotency_key VALUES ('k1', gen_random_uuid(), 0)"
    exc = error_of(engine, row, row)
    assert exc.orig.sqlstate == "23505"  # type: ignore[union-attr]
    assert DIALECT.classify(exc) is ErrorKind.DUPLICATE_IDEMPOTENCY_KEY


def test_duplicate_business_key_is_classified(store: PostgresStore) -> None:
    clock = FakeClock()
    store.insert_jobs([new_job(clock, business_key="bk")], now=clock.now())
    with pytest.raises(DBAPIError) as info, store.engine.begin() as conn:
        store._insert(conn, [new_job(clock, business_key="bk")], clock.now())
    assert DIALECT.classify(info.value) is ErrorKind.DUPLICATE_BUSINESS_KEY
    # ... and the store turns it into the typed error, inserting nothing.
    with pytest.raises(DuplicateBusinessKeyError):
        store.insert_jobs([new_job(clock), new_job(clock, business_key="bk")], now=clock.now())
    assert store.count_by_status() == {JobStatus.PENDING.value: 1}


def test_a_stored_job_id_is_classified(store: PostgresStore) -> None:
    """The job's and the queue's primary keys: a job keyed by its own id is stored already."""
    clock = FakeClock()
    job = keyed_by_id(clock)
    store.insert_jobs([job], now=clock.now())
    with pytest.raises(DBAPIError) as info, store.engine.begin() as conn:
        store._insert(conn, [job], clock.now())
    assert info.value.orig.diag.constraint_name in JOB_ID_CONSTRAINTS  # type: ignore[union-attr]
    assert DIALECT.classify(info.value) is ErrorKind.DUPLICATE_JOB_ID
    [again] = store.insert_jobs([job], now=clock.now())
    assert (again.job_id, again.inserted) == (job.job_id, False)


def test_other_unique_violations_are_not_duplicate_keys(engine: Engine) -> None:
    row = "INSERT INTO scheduler_node VALUES ('n1', 0, 0, 'ALIVE')"  # node_id primary key
    exc = error_of(engine, row, row)
    assert DIALECT.classify(exc) is ErrorKind.OTHER


def test_lock_not_available_is_retryable(engine: Engine) -> None:
    with engine.begin() as holder:
        holder.execute(text("INSERT INTO scheduler_node VALUES ('n1', 0, 0, 'ALIVE')"))
    with engine.connect() as holder:
        holder.execute(text("SELECT * FROM scheduler_node FOR UPDATE"))
        exc = error_of(engine, "SELECT * FROM scheduler_node FOR UPDATE NOWAIT")
        holder.rollback()
    assert exc.orig.sqlstate == "55P03"  # type: ignore[union-attr]
    assert DIALECT.classify(exc) is ErrorKind.RETRYABLE


def test_deadlock_is_retryable(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO scheduler_node VALUES ('a', 0, 0, 'ALIVE'), ('b', 0, 0, 'ALIVE')")
        )
    errors: list[BaseException] = []
    both_hold_one = threading.Barrier(2)

    def lock_in_order(first: str, second: str) -> None:
        try:
            with engine.begin() as conn:
                conn.execute(text("SET LOCAL deadlock_timeout = '50ms'"))
                conn.execute(
                    text("SELECT 1 FROM scheduler_node WHERE node_id = :n FOR UPDATE"), {"n": first}
                )
                both_hold_one.wait(timeout=10)
                conn.execute(
                    text("SELECT 1 FROM scheduler_node WHERE node_id = :n FOR UPDATE"),
                    {"n": second},
                )
        except DBAPIError as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=lock_in_order, args=("a", "b")),
        threading.Thread(target=lock_in_order, args=("b", "a")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(errors) == 1, errors
    assert errors[0].orig.sqlstate == "40P01"  # type: ignore[attr-defined]
    assert DIALECT.classify(errors[0]) is ErrorKind.RETRYABLE


def test_serialization_failure_is_retryable(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO scheduler_node VALUES ('n1', 0, 0, 'ALIVE')"))
    serializable = engine.execution_options(isolation_level="SERIALIZABLE")
    with serializable.connect() as a, serializable.connect() as b:
        a.execute(text("SELECT * FROM scheduler_node"))
        b.execute(text("SELECT * FROM scheduler_node"))
        a.execute(text("UPDATE scheduler_node SET heartbeat_at = 1"))
        a.commit()
        with pytest.raises(DBAPIError) as info:
            b.execute(text("UPDATE scheduler_node SET heartbeat_at = 2"))
        b.rollback()
    assert info.value.orig.sqlstate == "40001"  # type: ignore[union-attr]
    assert DIALECT.classify(info.value) is ErrorKind.RETRYABLE


def test_terminated_connection_is_transient(engine: Engine, postgres_store_url: str) -> None:
    with engine.connect() as victim:
        pid = victim.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with psycopg.connect(
            postgres_store_url.replace("postgresql+psycopg", "postgresql"), autocommit=True
        ) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(DBAPIError) as info:
            victim.execute(text("SELECT 1"))
    assert DIALECT.classify(info.value) is ErrorKind.TRANSIENT


def test_refused_connection_is_transient() -> None:
    url = f"postgresql+psycopg://nobody:x@127.0.0.1:{free_port()}/none"
    eng = create_engine(url, **DIALECT.engine_kwargs(url))
    try:
        with pytest.raises(DBAPIError) as info, eng.connect():
            pass
    finally:
        eng.dispose()
    assert DIALECT.classify(info.value) is ErrorKind.TRANSIENT


def test_admin_shutdown_sqlstate_is_transient() -> None:
    exc = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    assert exc.sqlstate == "57P01"
    assert DIALECT.classify(exc) is ErrorKind.TRANSIENT
    assert DIALECT.classify(psycopg.errors.UndefinedTable("nope")) is ErrorKind.OTHER


# ---------------------------------------------------------------------- store behaviour
def test_store_reports_unavailable_then_reconnects(
    store: PostgresStore, postgres_store_url: str
) -> None:
    """A killed pooled connection costs one StoreUnavailable at most; the next call works."""
    clock = FakeClock()
    store.insert_jobs([new_job(clock)], now=clock.now())
    with psycopg.connect(
        postgres_store_url.replace("postgresql+psycopg", "postgresql"), autocommit=True
    ) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    try:
        counts = store.count_by_status()  # pre-ping notices the dead connection
    except StoreUnavailable:
        counts = store.count_by_status()
    assert counts == {JobStatus.PENDING.value: 1}


def test_migration_lock_is_an_advisory_transaction_lock(store: PostgresStore) -> None:
    with store.engine.begin() as conn, DIALECT.migration_lock(conn):
        held = conn.execute(
            text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND pid = pg_backend_pid() AND granted"
            )
        ).scalar_one()
        assert held == 1
        with store.engine.connect() as other:
            got = other.execute(
                text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": 0x7261746368657444}
            ).scalar_one()
            other.rollback()
        assert got is False
    with store.engine.connect() as conn:
        released = conn.execute(
            text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": 0x7261746368657444}
        ).scalar_one()
        assert released is True


def test_capabilities(store: PostgresStore) -> None:
    caps = store.capabilities
    assert (caps.dialect, caps.skip_locked, caps.multi_host) == ("postgresql", True, True)
    assert store.engine.pool.status()  # a real pool, not a NullPool
    assert has_socket_check(store.engine)  # checked on checkout (ratchet.sql.pool)


def test_pooled_connections_killed_by_the_server_are_replaced_before_use(
    store: PostgresStore, postgres_store_url: str
) -> None:
    """The checkout check sees the server's goodbye on the socket: no call fails."""
    clock = FakeClock()
    with store.engine.connect() as a, store.engine.connect() as b:  # two pooled connections
        a.execute(text("SELECT 1"))
        b.execute(text("SELECT 1"))
    store.insert_jobs([new_job(clock)], now=clock.now())
    with psycopg.connect(
        postgres_store_url.replace("postgresql+psycopg", "postgresql"), autocommit=True
    ) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    # the backends are gone once they left pg_stat_activity
    wait_until(lambda: admin_count(postgres_store_url) == 0, 5, interval=0.05)
    store.insert_jobs([new_job(clock)], now=clock.now())  # no StoreUnavailable
    assert store.count_by_status() == {JobStatus.PENDING.value: 2}


def admin_count(url: str) -> int:
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        return int(row[0]) if row else 0


# ---------------------------------------------------------------------- URLs and plugins
@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@h:5432/db", "postgresql+psycopg://u:p@h:5432/db"),
        ("postgres://u@h/db?sslmode=require", "postgresql+psycopg://u@h/db?sslmode=require"),
        ("postgresql+psycopg://u:p%40x@h/db", "postgresql+psycopg://u:p%40x@h/db"),
    ],
)
def test_normalize_url(given: str, expected: str) -> None:
    assert normalize_url(given) == expected


def test_ratchet_picks_the_postgres_store_and_coordinator(postgres_store_url: str) -> None:
    plain = postgres_store_url.replace("postgresql+psycopg://", "postgresql://")
    with Ratchet(plain, allowed_modules=["nothing"], coordinator="postgres") as app:
        assert isinstance(app.store, PostgresStore)
        assert type(app.coordinator).__name__ == "PostgresClusterCoordinator"
        assert app.coordinator.wait_connected(10)  # type: ignore[attr-defined]
        now = app.now()
        assert abs(app.store.database_time() - now) < timedelta(seconds=5)
    assert app.coordinator.state == "closed"  # type: ignore[attr-defined]


def test_postgres_coordinator_needs_a_postgres_url(tmp_path: Any) -> None:
    from ratchet.domain.errors import ConfigurationError
    from ratchet.ports import CoordinatorContext

    context = CoordinatorContext(store_url=f"sqlite:///{tmp_path / 'x.db'}", node_name="n1")
    with pytest.raises(ConfigurationError, match="PostgreSQL"):
        make_postgres_coordinator("postgres", context)
    with pytest.raises(ConfigurationError, match="PostgreSQL"):
        make_postgres_coordinator("postgres", CoordinatorContext(store_url=None, node_name="n1"))


def test_entry_point_registers_store_and_coordinator() -> None:
    plugins = Plugins(make_plugin_manager())
    for scheme in ("postgresql", "postgres"):
        assert plugins.stores.owner(scheme) == "postgres"  # the entry point's name
        assert plugins.store_factory(f"{scheme}://u@h/db") is plugins.stores["postgresql"]
    for spec in ("postgres", "postgresql://u@h/db", "postgresql+psycopg://u@h/db"):
        assert plugins.coordinator_factory(spec) is make_postgres_coordinator


def test_store_options_merge_connect_args(postgres_store_url: str) -> None:
    store = PostgresStore(
        postgres_store_url, connect_args={"application_name": "mine"}, pool_size=3
    )
    try:
        with store.engine.connect() as conn:
            name = conn.execute(text("SHOW application_name")).scalar_one()
            raw = conn.connection.dbapi_connection
            assert raw is not None
            params = raw.info.get_parameters()  # type: ignore[attr-defined]
        assert name == "mine"
        # the dialect's client-side defaults survived the override
        assert (params["keepalives_idle"], params["connect_timeout"]) == ("10", "5")
        assert store.engine.pool.size() == 3  # type: ignore[attr-defined]
    finally:
        store.close()


# ---------------------------------------------------------------------- idle pings
def _pooled_engine(url: str, idle_seconds: float) -> Engine:
    kwargs = {**DIALECT.engine_kwargs(url), "pool_size": 1, "max_overflow": 0}
    eng = create_engine(url, **kwargs)
    ping_when_idle(eng, idle_seconds)
    return eng


def _terminate_pooled_backend(eng: Engine, admin_url: str) -> None:
    with eng.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    admin = create_engine(admin_url)
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        admin.dispose()


def test_an_idle_pooled_connection_that_died_is_replaced_before_use(
    postgres_store_url: str,
) -> None:
    eng = _pooled_engine(postgres_store_url, idle_seconds=0.0)  # every reuse counts as idle
    try:
        _terminate_pooled_backend(eng, postgres_store_url)
        with eng.begin() as conn:  # the ping notices, the pool opens a new connection
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        eng.dispose()


def test_a_connection_used_a_moment_ago_is_not_pinged(postgres_store_url: str) -> None:
    eng = _pooled_engine(postgres_store_url, idle_seconds=3600.0)
    try:
        _terminate_pooled_backend(eng, postgres_store_url)
        with pytest.raises(DBAPIError) as info, eng.begin() as conn:
            conn.execute(text("SELECT 1"))
        assert info.value.connection_invalidated, "a lost connection must be recognised"
        with eng.begin() as conn:  # the pool was invalidated: a fresh connection works
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        eng.dispose()


# ---------------------------------------------------------------------- id lists
def test_a_list_of_ids_is_one_array_parameter(store: PostgresStore) -> None:
    """``in_values`` binds any number of ids as one ``= ANY`` array: the statement text is the
    same for 3 ids and for 1,500, and it selects exactly the listed rows."""
    from sqlalchemy import select
    from sqlalchemy.dialects import postgresql

    from ratchet.sql import schema

    clock = FakeClock()
    jobs = [new_job(clock) for _ in range(1500)]
    store.insert_jobs(jobs, now=clock.now())
    job = schema.job
    wanted = [j.job_id for j in jobs[::2]]

    def stmt(ids: list[Any]) -> Any:
        return select(job.c.job_id).where(DIALECT.in_values(job.c.job_id, ids))

    texts = {
        str(stmt(ids).compile(dialect=postgresql.psycopg.dialect())) for ids in (wanted[:3], wanted)
    }
    assert len(texts) == 1 and "= ANY (" in texts.pop()
    with store.engine.connect() as conn:
        found = set(conn.execute(stmt(wanted)).scalars())
        assert found == set(wanted)
        assert list(conn.execute(stmt([])).scalars()) == []
