"""The PostgreSQL store behind a real PgBouncer (Debian's package) in transaction pooling: the
store and watcher conformance suites through it, worker processes through it (the LISTEN
connection direct), the switch that turns prepared statements off, and the typed error when
PgBouncer or PostgreSQL refuses connections. Also the store's one pool: it shrinks when idle,
switches autocommit per statement and can be resized."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import psycopg
import pytest

from pg_fixtures import libpq_url, through_pgbouncer
from ratchet import ConnectionLimitReached, Ratchet
from ratchet.domain.errors import ConfigurationError
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.ports import CoordinatorContext
from ratchet.sql.pool import ShrinkingQueuePool, has_socket_check
from ratchet.testing import wait_until
from ratchet.testing.servers import PgBouncerServer
from ratchet.testing.store_contract import StoreContract
from ratchet.testing.watcher_contract import WatcherStoreContract
from ratchet_postgres import PostgresStore
from ratchet_postgres.plugin import make_postgres_coordinator
from ratchet_postgres.store import split_pgbouncer

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer]


@pytest.fixture
def store(pgbouncer_store_url: str) -> Iterator[PostgresStore]:
    """A store whose every statement goes through PgBouncer (transaction pooling)."""
    plugins = Plugins(make_plugin_manager())
    store = plugins.store_factory(pgbouncer_store_url)(pgbouncer_store_url, None)
    assert isinstance(store, PostgresStore) and store.pgbouncer == "transaction"
    yield store
    store.close()


class TestStoreThroughPgBouncer(StoreContract):
    pass


class TestWatcherThroughPgBouncer(WatcherStoreContract):
    pass


def test_the_url_switch_turns_prepared_statements_off(pgbouncer_store_url: str) -> None:
    store = PostgresStore(pgbouncer_store_url)
    try:
        assert "pgbouncer" not in str(store.engine.url)
        assert split_pgbouncer(store.url)[1] == "transaction"  # reopening keeps the switch
        with store.engine.connect() as conn:
            assert conn.connection.dbapi_connection.prepare_threshold is None  # type: ignore[union-attr]
        # psycopg would prepare a statement by name from its sixth run on; through transaction
        # pooling the next run may land on a server connection that does not have it.
        for _ in range(12):
            assert store.count_by_status() is not None
            store.database_time()
    finally:
        store.close()


@pytest.mark.parametrize("value", ["statement", "yes-please"])
def test_an_unknown_pgbouncer_mode_is_refused(value: str) -> None:
    with pytest.raises(ConfigurationError, match="pgbouncer=transaction"):
        split_pgbouncer(f"postgresql+psycopg://u@h/db?pgbouncer={value}")


def test_session_pooling_keeps_prepared_statements() -> None:
    url, mode = split_pgbouncer("postgresql+psycopg://u@h/db?pgbouncer=session&sslmode=disable")
    assert mode == "session" and url == "postgresql+psycopg://u@h/db?sslmode=disable"


def test_the_postgres_coordinator_refuses_to_listen_through_transaction_pooling(
    pgbouncer_store_url: str,
) -> None:
    context = CoordinatorContext(store_url=pgbouncer_store_url, node_name="n")
    with pytest.raises(ConfigurationError, match="direct postgresql:// URL"):
        make_postgres_coordinator("postgres", context)
    with pytest.raises(ConfigurationError, match="Redis coordinator"):
        make_postgres_coordinator(pgbouncer_store_url, context)
    # The app hands the coordinator its store's URL: the switch must survive that hand-off.
    with pytest.raises(ConfigurationError, match="direct postgresql:// URL"):
        Ratchet(pgbouncer_store_url, coordinator="postgres", allowed_modules=["pg_jobs"])


def test_two_worker_processes_run_jobs_through_pgbouncer_exactly_once(
    pgbouncer_store_url: str,
    postgres_store_url: str,
    pgbouncer_server: PgBouncerServer,
    workers: Any,
    pg_jobs: ModuleType,
) -> None:
    """Worker processes whose store goes through PgBouncer and whose LISTEN connection goes
    straight to PostgreSQL (the coordinator's own URL) run every job once; a submitter on the
    same coordinator wakes them."""
    direct = libpq_url(postgres_store_url)
    with psycopg.connect(direct, autocommit=True) as db:
        db.execute(pg_jobs.SIDE_EFFECT_DDL)
        workers.url = pgbouncer_store_url
        slow = ("--min-delay", "30", "--max-delay", "30", "--burst-delay", "0.2")
        workers.start(2, "--concurrency", "2", *slow, coordinator=postgres_store_url)
        app = Ratchet(pgbouncer_store_url, allowed_modules=["pg_jobs"], coordinator=direct)
        try:
            _wait(
                lambda: _scalar(db, "SELECT count(*) FROM scheduler_node") == 2,
                "both nodes registered",
                workers,
            )
            app.submit_many([app.enqueue(pg_jobs.record, i, 20) for i in range(40)])
            _wait(
                lambda: _scalar(db, "SELECT count(*) FROM side_effect") >= 40,
                "40 jobs done",
                workers,
            )
            rows = db.execute("SELECT n, count(*) FROM side_effect GROUP BY n").fetchall()
            assert sorted(n for n, _ in rows) == list(range(40))
            assert all(c == 1 for _, c in rows), "every job ran once"
            listeners = _scalar(
                db,
                "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
                " 'ratchet-listener' AND datname = current_database()",
            )
            assert listeners >= 2, "the LISTEN connections go straight to PostgreSQL"
        finally:
            app.close()
            codes = workers.stop()
        assert codes == [0, 0], workers.logs()[-4000:]
        assert "Traceback" not in workers.logs(), workers.logs()[-4000:]


def test_pgbouncer_refusing_clients_raises_a_typed_error_naming_max_client_conn(
    postgres_server: Any, postgres_store_url: str
) -> None:
    bouncer = PgBouncerServer(
        upstream_host=postgres_server.host,
        upstream_port=postgres_server.port,
        user=postgres_server.user,
        password=postgres_server.password,
        settings={"max_client_conn": "1"},
    )
    with bouncer:
        url = through_pgbouncer(postgres_store_url, bouncer)
        with psycopg.connect(libpq_url(url.split("?")[0]), autocommit=True):
            store = PostgresStore(url)
            try:
                with pytest.raises(ConnectionLimitReached, match="PgBouncer's max_client_conn"):
                    store.count_by_status()
            finally:
                store.close()


def test_postgresql_refusing_connections_raises_a_typed_error_naming_the_limit(
    postgres_admin: Any, postgres_store_url: str
) -> None:
    role = f"limited_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw' CONNECTION LIMIT 0")
    try:
        from sqlalchemy.engine import make_url

        url = make_url(postgres_store_url).set(username=role, password="pw")
        store = PostgresStore(url.render_as_string(hide_password=False))
        try:
            with pytest.raises(ConnectionLimitReached, match="CONNECTION LIMIT") as caught:
                store.count_by_status()
            assert "RATCHET_POOL_SIZE" in str(caught.value)
        finally:
            store.close()
    finally:
        postgres_admin.execute(f"DROP ROLE {role}")


def test_a_connection_refused_over_the_limit_waits_for_one_of_the_pools_own(
    postgres_admin: Any, postgres_store_url: str
) -> None:
    """A role allowed one connection: while the store's one connection is held, a second
    thread's statement does not fail when the server refuses it another; it runs on the first
    connection once that comes back."""
    role = f"one_conn_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw' CONNECTION LIMIT 1")
    with psycopg.connect(libpq_url(postgres_store_url), autocommit=True) as owner:
        owner.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    try:
        from sqlalchemy.engine import make_url

        url = make_url(postgres_store_url).set(username=role, password="pw")
        store = PostgresStore(url.render_as_string(hide_password=False), pool_grow_after=0)
        pool = store.engine.pool
        assert isinstance(pool, ShrinkingQueuePool)
        counts: list[Any] = []
        errors: list[BaseException] = []

        def count() -> None:
            try:
                counts.append(store.count_by_status())
            except BaseException as error:  # reported below
                errors.append(error)

        try:
            with store.engine.connect() as held:
                held.exec_driver_sql("SELECT 1")
                other = threading.Thread(target=count)
                other.start()
                assert wait_until(lambda: pool.waited_after_refusal == 1 or bool(errors), 30)
                assert not errors, errors
            other.join(30)
            assert not errors, errors
            assert len(counts) == 1
        finally:
            store.close()
    finally:
        with psycopg.connect(libpq_url(postgres_store_url), autocommit=True) as owner:
            owner.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}")
        postgres_admin.execute(f"DROP ROLE {role}")


def test_an_exhausted_pool_raises_a_typed_error_naming_the_pool_settings(
    postgres_store_url: str,
) -> None:
    store = PostgresStore(postgres_store_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        store.count_by_status()
        with (
            store.engine.connect(),  # the only connection, held
            pytest.raises(ConnectionLimitReached, match="RATCHET_POOL_SIZE"),
        ):
            store.count_by_status()
        assert store.count_by_status() is not None
    finally:
        store.close()


def test_the_pool_shrinks_to_one_connection_once_the_others_sat_idle(
    postgres_store_url: str,
) -> None:
    """Three threads at once open three connections; once two of them sat unused for the idle
    timeout, the next return closes them."""
    app_name = f"shrink-{uuid.uuid4().hex[:6]}"
    store = PostgresStore(
        postgres_store_url, pool_idle_timeout=30.0, connect_args={"application_name": app_name}
    )
    pool: Any = store.engine.pool
    now = [1000.0]
    pool.clock = lambda: now[0]
    try:
        store.count_by_status()
        barrier = threading.Barrier(3)

        def hold() -> None:
            with store.engine.connect():
                barrier.wait(10)

        threads = [threading.Thread(target=hold) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert pool.checkedin() == 3
        assert _sessions(postgres_store_url, app_name, 3) == 3
        now[0] += 29.0
        store.count_by_status()
        assert pool.checkedin() == 3, "none idle for the timeout yet"
        now[0] += 2.0
        store.count_by_status()  # the most recent one serves; the two below it are closed
        assert pool.checkedin() == 1 and pool.closed_idle == 2
        assert _sessions(postgres_store_url, app_name, 1) == 1
    finally:
        store.close()


def test_single_statements_switch_the_pooled_connection_to_autocommit_and_back(
    postgres_store_url: str,
) -> None:
    """One pool serves both: a single-statement write runs in autocommit on a pooled
    connection, which comes back in transaction mode for the next caller."""
    store = PostgresStore(postgres_store_url)
    try:
        flag = store._run(lambda conn: conn.connection.dbapi_connection.autocommit, autocommit=True)
        assert flag is True
        with store.engine.connect() as conn:
            assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]
        assert store.engine.pool.checkedin() == 1  # type: ignore[attr-defined]
    finally:
        store.close()


def test_resizing_the_pool_keeps_its_checks_and_refuses_bad_sizes(postgres_store_url: str) -> None:
    """What ``ratchet worker --pool-size`` does to the app's store."""
    store = PostgresStore(postgres_store_url)
    try:
        store.count_by_status()
        assert store.resize_pool(3, 1) is True
        pool: Any = store.engine.pool
        assert (pool.size(), pool.max_overflow) == (3, 1)
        assert has_socket_check(store.engine)
        assert store.count_by_status() is not None
        assert store.resize_pool(max_overflow=0) and store.engine.pool.size() == 3  # type: ignore[attr-defined]
        with pytest.raises(ConfigurationError, match="pool_size must be at least 1"):
            store.resize_pool(0)
    finally:
        store.close()


def _sessions(url: str, app_name: str, expected: int) -> int:
    """Sessions of ``app_name``, waiting (bounded) for ``expected``: a closed session leaves
    pg_stat_activity a moment after the client closed it."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app_name,)
            ).fetchone()
            assert row is not None
            if row[0] == expected or time.monotonic() > deadline:
                return int(row[0])
            time.sleep(0.05)


def _scalar(db: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = db.execute(query, params or None).fetchone()
    return None if row is None else row[0]


def _wait(check: Any, what: str, workers: Any, timeout: float = 90) -> None:
    def progressed() -> bool:
        workers.assert_running()
        return bool(check())

    if not wait_until(progressed, timeout, interval=0.1):
        raise AssertionError(f"timed out waiting for: {what}\n{workers.logs()[-4000:]}")


def test_the_pool_wait_before_growing_is_a_store_option(postgres_store_url: str) -> None:
    """``pool_grow_after`` reaches the pool (0.05 s by default) and survives a resize."""
    default = PostgresStore(postgres_store_url)
    tuned = PostgresStore(postgres_store_url, pool_grow_after=0.25)
    try:
        assert default.engine.pool.grow_after == 0.05  # type: ignore[attr-defined]
        assert tuned.engine.pool.grow_after == 0.25  # type: ignore[attr-defined]
        tuned.resize_pool(4, 2)
        assert tuned.engine.pool.grow_after == 0.25  # type: ignore[attr-defined]
    finally:
        default.close()
        tuned.close()
