"""The MySQL dialect against a real MariaDB 10.11: error classification, isolation, keys, plan.

Every error here is provoked for real on the server (a duplicate key, a deadlock between two
connections, a lock wait timeout, a killed connection); the classifier must name each one.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, insert, select, text
from sqlalchemy.exc import DBAPIError

from ratchet.domain.errors import ConnectionLimitReached, DuplicateBusinessKeyError
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.sql import schema
from ratchet.sql.dialect import ErrorKind
from ratchet.testing import FakeClock, assert_eventually
from ratchet.testing.store_contract import new_job
from ratchet_mysql import MySQLDialect, MySQLStore, normalize_url
from ratchet_mysql.dialect import driver_of, error_code

BOOST = timedelta(minutes=15)
Q = schema.job_queue
IDEM = schema.idempotency_key


#: InnoDB refreshes the cache behind ``INNODB_TRX`` only when it was not read for 0.1 s: polled
#: faster than that, it keeps showing the transactions of whenever it was last refreshed (of a
#: previous test, say).
TRX_POLL_INTERVAL = 0.15


def lock_wait_of(template: Any, connection_id: int) -> bool:
    """Whether the session ``connection_id`` is waiting for a row lock (poll it no faster than
    :data:`TRX_POLL_INTERVAL`)."""
    rows = template.execute(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX"
        " WHERE trx_mysql_thread_id = %s AND trx_state = 'LOCK WAIT'",
        args=(connection_id,),
    )
    return bool(rows[0][0])


def lock_job_row(store: MySQLStore, job_id: Any) -> Any:
    """A connection holding ``FOR UPDATE`` on the job's queue row (caller rolls back)."""
    conn = store.engine.connect()
    conn.begin()
    conn.execute(select(Q.c.job_id).where(Q.c.job_id == job_id).with_for_update()).all()
    return conn


def connection_id(conn: Any) -> int:
    return int(conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one())


# ---------------------------------------------------------------------- duplicates
def test_mariadb_1011_duplicate_idempotency_key(mysql_store: MySQLStore, clock: FakeClock) -> None:
    dialect = mysql_store.dialect
    row = {"idempotency_key": "pay-1", "job_id": new_job(clock).job_id, "created_at": clock.now()}
    with mysql_store.engine.begin() as conn:
        conn.execute(insert(IDEM), row)
    with pytest.raises(DBAPIError) as caught, mysql_store.engine.begin() as conn:
        conn.execute(insert(IDEM), row)
    assert error_code(caught.value) == 1062
    assert dialect.classify(caught.value) is ErrorKind.DUPLICATE_IDEMPOTENCY_KEY


def test_mariadb_1011_duplicate_business_key(mysql_store: MySQLStore, clock: FakeClock) -> None:
    [first] = [new_job(clock, business_key="order-7")]
    mysql_store.insert_jobs([first], now=clock.now())
    second = new_job(clock, business_key="order-7")
    with pytest.raises(DuplicateBusinessKeyError):
        mysql_store.insert_jobs([second], now=clock.now())
    with pytest.raises(DBAPIError) as caught, mysql_store.engine.begin() as conn:
        conn.execute(
            insert(Q),
            {
                "job_id": first.job_id,  # any id: the unique index is checked too
                "status": "PENDING",
                "priority": 0,
                "scheduled_time": clock.now(),
                "attempts": 0,
                "epoch": 0,
                "business_key": "order-7",
            },
        )
    assert error_code(caught.value) == 1062
    # MariaDB reports whichever unique key it checks first: the primary key of the queue table
    # is a job id taken, the business key index is a business key.
    kind = mysql_store.dialect.classify(caught.value)
    assert kind in (ErrorKind.DUPLICATE_BUSINESS_KEY, ErrorKind.DUPLICATE_JOB_ID)


def test_mariadb_1011_duplicate_job_id(mysql_store: MySQLStore, clock: FakeClock) -> None:
    """The job table's primary key: a job keyed by its own id is stored already."""
    [job] = [new_job(clock)]
    mysql_store.insert_jobs([job], now=clock.now())
    row = MySQLStore._job_row(job)
    with pytest.raises(DBAPIError) as caught, mysql_store.engine.begin() as conn:
        conn.execute(insert(schema.job), row)
    assert error_code(caught.value) == 1062
    assert mysql_store.dialect.classify(caught.value) is ErrorKind.DUPLICATE_JOB_ID


def test_mariadb_1011_other_primary_key_duplicate_is_other(
    mysql_store: MySQLStore, clock: FakeClock
) -> None:
    [job] = [new_job(clock, tags=("eu",))]
    mysql_store.insert_jobs([job], now=clock.now())
    with pytest.raises(DBAPIError) as caught, mysql_store.engine.begin() as conn:
        conn.execute(insert(schema.job_tag), {"job_id": job.job_id, "tag": "eu"})
    assert error_code(caught.value) == 1062
    assert mysql_store.dialect.classify(caught.value) is ErrorKind.OTHER


def test_mariadb_1011_keys_compare_exactly(mysql_store: MySQLStore, clock: FakeClock) -> None:
    """Keys differing only in case, accents or trailing spaces are different keys (0003)."""
    jobs = [
        new_job(clock, idempotency_key=key, business_key=key)
        for key in ("Pay-1", "pay-1", "pay-1 ", "café", "cafe")
    ]
    results = mysql_store.insert_jobs(jobs, now=clock.now())
    assert all(r.inserted for r in results)
    assert {mysql_store.find_by_idempotency_key(j.idempotency_key) for j in jobs} == {
        j.job_id for j in jobs
    }


# ---------------------------------------------------------------------- retryable
def test_mariadb_1011_real_deadlock_is_retryable(
    mysql_store: MySQLStore, mysql_template: Any, clock: FakeClock
) -> None:
    one, two = new_job(clock), new_job(clock)
    mysql_store.insert_jobs([one, two], now=clock.now())
    a = lock_job_row(mysql_store, one.job_id)
    b = lock_job_row(mysql_store, two.job_id)
    errors: dict[str, BaseException | None] = {}

    def a_takes_two() -> None:
        try:
            a.execute(select(Q.c.job_id).where(Q.c.job_id == two.job_id).with_for_update()).all()
            errors["a"] = None
        except DBAPIError as exc:
            errors["a"] = exc

    a_id = connection_id(a)
    waiter = threading.Thread(target=a_takes_two)
    waiter.start()
    try:
        assert_eventually(
            lambda: lock_wait_of(mysql_template, a_id),
            20,
            "the lock wait",
            interval=TRX_POLL_INTERVAL,
        )
        try:
            b.execute(select(Q.c.job_id).where(Q.c.job_id == one.job_id).with_for_update()).all()
            errors["b"] = None
        except DBAPIError as exc:
            errors["b"] = exc
        if errors["b"] is None:  # b won: a is the victim; end b so that a's thread finishes
            b.rollback()
        waiter.join(30)
    finally:
        for conn in (a, b):
            conn.rollback()
            conn.close()
    victims = [e for e in errors.values() if e is not None]
    assert len(victims) == 1, errors
    assert error_code(victims[0]) == 1213
    assert mysql_store.dialect.classify(victims[0]) is ErrorKind.RETRYABLE


def test_mariadb_1011_lock_wait_timeout_is_retryable(
    mysql_store: MySQLStore, mysql_template: Any, clock: FakeClock
) -> None:
    [job] = [new_job(clock)]
    mysql_store.insert_jobs([job], now=clock.now())
    holder = lock_job_row(mysql_store, job.job_id)
    try:
        with mysql_store.engine.connect() as waiter:
            waiter.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 1")
            with pytest.raises(DBAPIError) as caught:
                waiter.execute(
                    select(Q.c.job_id).where(Q.c.job_id == job.job_id).with_for_update()
                ).all()
            waiter.rollback()
    finally:
        holder.rollback()
        holder.close()
    assert error_code(caught.value) == 1205
    assert mysql_store.dialect.classify(caught.value) is ErrorKind.RETRYABLE


def test_mariadb_1011_store_retries_lock_timeouts_and_counts_them(
    mysql_database_url: str, mysql_template: Any, clock: FakeClock
) -> None:
    store = MySQLStore(
        mysql_database_url,
        connect_args={"init_command": "SET time_zone = '+00:00', innodb_lock_wait_timeout = 1"},
    )
    try:
        [job] = [new_job(clock)]
        store.insert_jobs([job], now=clock.now())
        holder = lock_job_row(store, job.job_id)
        outcome: dict[str, bool] = {}
        canceller = threading.Thread(
            target=lambda: outcome.setdefault(
                "ok", store.cancel_job(job.job_id, now=clock.now()).value
            )
        )
        canceller.start()
        try:
            assert_eventually(lambda: store.retried_errors >= 1, 20, "a retried lock timeout")
        finally:
            holder.rollback()
            holder.close()
        canceller.join(30)
        assert outcome == {"ok": True}
        assert store.retried_errors >= 1
        record = store.get_job(job.job_id)
        assert record is not None and record.status is JobStatus.CANCELED
    finally:
        store.close()


# ---------------------------------------------------------------------- transient
def test_mariadb_1011_killed_connection_is_transient_and_store_reconnects(
    mysql_store: MySQLStore, mysql_template: Any, clock: FakeClock
) -> None:
    mysql_store.insert_jobs([new_job(clock)], now=clock.now())
    conn = mysql_store.engine.connect()
    victim = connection_id(conn)
    mysql_template.execute(f"KILL {victim}")
    with pytest.raises(DBAPIError) as caught:
        conn.exec_driver_sql("SELECT 1").all()
    conn.close()
    assert (
        error_code(caught.value) in (2006, 2013, 1927, 4031) or caught.value.connection_invalidated
    )
    assert mysql_store.dialect.classify(caught.value) is ErrorKind.TRANSIENT
    # Every pooled session killed: the next operations reconnect (pre-ping) and carry on.
    mysql_template.kill_sessions("ratchet_t")
    assert mysql_store.count_by_status() == {"PENDING": 1}
    assert len(mysql_store.claim("n", 5, now=clock.now(), boost_interval=BOOST)) == 1


def test_connection_refused_is_transient(mysql_driver: str) -> None:
    store = MySQLStore(f"mysql+{mysql_driver}://nobody:x@127.0.0.1:1/none?connect_timeout=2")
    try:
        with pytest.raises(DBAPIError) as caught, store.engine.connect():
            pass
        # PyMySQL says 2003 (can't connect); MariaDB's client library, under mysqlclient, 2002.
        assert error_code(caught.value) == {"pymysql": 2003, "mysqldb": 2002}[mysql_driver]
        assert store.dialect.classify(caught.value) is ErrorKind.TRANSIENT
    finally:
        store.close()


def test_a_refused_connection_over_a_limit_raises_a_typed_error_naming_it(
    mysql_template: Any, mysql_database_url: str, mysql_driver: str
) -> None:
    from sqlalchemy.engine import make_url

    user = f"lim{time.monotonic_ns() % 10**8}"
    database = make_url(mysql_database_url).database
    mysql_template.execute(
        f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw' WITH MAX_USER_CONNECTIONS 1;"
        f" GRANT ALL ON `{database}`.* TO '{user}'@'%'"
    )
    url = make_url(mysql_database_url).set(username=user, password="pw")
    holder = MySQLStore(url.render_as_string(hide_password=False))
    store = MySQLStore(
        url.set(drivername=f"mysql+{mysql_driver}").render_as_string(hide_password=False)
    )
    try:
        with holder.engine.connect():  # the account's one connection
            with pytest.raises(ConnectionLimitReached, match="MAX_USER_CONNECTIONS") as caught:
                store.count_by_status()
            assert "RATCHET_POOL_SIZE" in str(caught.value)
        holder.close()  # the pooled connection goes too
        assert store.count_by_status() == {}
    finally:
        store.close()
        holder.close()
        mysql_template.execute(f"DROP USER '{user}'@'%'")


def test_the_pool_closes_surplus_idle_connections(mysql_store: MySQLStore) -> None:
    """MariaDB's store uses the same shrinking pool as PostgreSQL's."""
    pool: Any = mysql_store.engine.pool
    now = [0.0]
    pool.clock = lambda: now[0]
    first, second = mysql_store.engine.connect(), mysql_store.engine.connect()
    first.close()
    second.close()
    assert pool.checkedin() == 2
    now[0] += pool.idle_timeout + 1
    assert mysql_store.count_by_status() == {}
    assert pool.checkedin() == 1 and pool.closed_idle == 1


# ---------------------------------------------------------------------- isolation, plugin
def test_mariadb_1011_sessions_run_read_committed(
    mysql_store: MySQLStore, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="ratchet.mysql"),
        mysql_store.engine.connect() as c,
    ):
        level = c.exec_driver_sql("SELECT @@SESSION.tx_isolation").scalar_one()
    assert level == "READ-COMMITTED"
    assert not caplog.records


def test_mariadb_1011_warns_when_isolation_is_not_read_committed(
    mysql_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MySQLStore(mysql_database_url, isolation_level="REPEATABLE READ")
    try:
        with caplog.at_level(logging.WARNING, logger="ratchet.mysql"), store.engine.connect():
            pass
    finally:
        store.close()
    assert any("REPEATABLE READ" in r.getMessage() for r in caplog.records)


def test_plugin_serves_mysql_and_mariadb_urls(mysql_driver: str) -> None:
    """Through each driver (mysqlclient, the optional C one, skips only where it does not
    import, and fails then when mysql is a required backend, as in CI)."""
    plugins = Plugins(make_plugin_manager())
    urls = {
        "mysql+pymysql://u@h/db": "pymysql",
        "mariadb+pymysql://u@h/db": "pymysql",
        "mysql://u@h/db": "pymysql",
        "mysql+mysqldb://u@h/db": "mysqldb",
        "mariadb+mysqldb://u@h/db": "mysqldb",
    }
    served = {url: driver for url, driver in urls.items() if driver == mysql_driver}
    assert len(served) >= 2
    for url, driver in served.items():
        store = plugins.store_factory(url)(url, None)
        try:
            assert isinstance(store, MySQLStore)
            assert store.capabilities.skip_locked and store.capabilities.multi_host
            assert store.driver.name == driver == store.engine.dialect.driver
        finally:
            store.close()


def test_urls_without_a_driver_mean_pymysql() -> None:
    assert normalize_url("mysql://u@h/db") == "mysql+pymysql://u@h/db"
    assert normalize_url("mariadb://u@h/db") == "mariadb+pymysql://u@h/db"
    with pytest.raises(ValueError, match="unsupported MySQL driver"):
        MySQLStore("mysql+asyncmy://u@h/db")


def test_ssl_disabled_query_flag_is_a_real_boolean() -> None:
    dialect = MySQLDialect()
    for value, expected in (("true", True), ("false", False), ("0", False), ("1", True)):
        args = dialect.engine_kwargs(f"mysql+pymysql://u@h/db?ssl_disabled={value}")
        assert args["connect_args"]["ssl_disabled"] is expected


def test_ssl_disabled_becomes_ssl_mode_for_mysqlclient() -> None:
    """mysqlclient has no ``ssl_disabled`` argument (it would refuse to connect)."""
    driver = driver_of("mysql+mysqldb://u@h/db")
    for value, expected in (("true", {"ssl_mode": "DISABLED"}), ("false", {}), ("0", {})):
        cparams: dict[str, Any] = {"host": "h", "ssl_disabled": value}
        driver.prepare_connect(cparams)
        assert cparams == {"host": "h", **expected}
    kwargs = MySQLDialect().engine_kwargs("mysql+mysqldb://u@h/db?ssl_disabled=true")
    assert "ssl_disabled" not in kwargs["connect_args"]


TRICKY_VALUES: list[Any] = [
    'it\'s a \\ "test" 100% %s %% \n\r\t\x1a\x00 é 中 🚀',
    b"\x00\xff'\\\"%s" + bytes(range(256)),
    "",
    b"",
    None,
    0,
    -(2**63),
    2**64 - 1,
    True,
    1.5,
]


@pytest.mark.parametrize("no_backslash_escapes", [False, True])
def test_mariadb_1011_values_the_store_renders_round_trip(
    mysql_store: MySQLStore, no_backslash_escapes: bool
) -> None:
    """The store interpolates parameters itself (``Driver.literal``): every value comes back
    as it went in, one at a time, in a batch and in a multi-row insert, also under
    ``NO_BACKSLASH_ESCAPES`` (where a backslash is an ordinary character)."""
    with mysql_store.engine.begin() as conn:
        if no_backslash_escapes:
            conn.exec_driver_sql(
                "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')"
            )
        placeholders = ", ".join(["%s"] * len(TRICKY_VALUES))
        row = conn.exec_driver_sql(f"SELECT {placeholders}", tuple(TRICKY_VALUES)).one()
        conn.exec_driver_sql(
            "CREATE TEMPORARY TABLE tricky (n INT PRIMARY KEY, s LONGTEXT, b LONGBLOB)"
        )
        texts = [v for v in TRICKY_VALUES if isinstance(v, str)]
        blobs = [v for v in TRICKY_VALUES if isinstance(v, bytes)]
        rows = [(n, t, b) for n, (t, b) in enumerate((t, b) for t in texts for b in blobs)]
        conn.exec_driver_sql("INSERT INTO tricky (n, s, b) VALUES (%s, %s, %s)", rows)
        conn.exec_driver_sql(  # a batched UPDATE: the multi-statement pipeline
            "UPDATE tricky SET s = CONCAT(s, %s) WHERE n = %s", [(t, n) for n, t, _ in rows]
        )
        back = conn.exec_driver_sql("SELECT n, s, b FROM tricky ORDER BY n").all()
        if no_backslash_escapes:
            conn.exec_driver_sql(
                "SET SESSION sql_mode = REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', '')"
            )
    assert list(row) == [
        v if not isinstance(v, bool | float) else float(v) if isinstance(v, float) else int(v)
        for v in TRICKY_VALUES
    ]
    assert [tuple(r) for r in back] == [(n, t + t, b) for n, t, b in rows]


# ---------------------------------------------------------------------- claim plan
def test_mariadb_1011_claim_uses_the_claim_index(
    mysql_store: MySQLStore, mysql_template: Any, clock: FakeClock
) -> None:
    jobs = [new_job(clock, priority=p) for p in JobPriority for _ in range(400)]
    mysql_store.insert_jobs(jobs, now=clock.now())
    mysql_template.execute("ANALYZE TABLE scheduler_job_queue", "ratchet_t")
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        if "SKIP LOCKED" in statement and "UNION" in statement:
            seen.append((statement, params))

    event.listen(mysql_store.engine, "before_cursor_execute", capture)
    try:
        claimed = mysql_store.claim("n", 50, now=clock.now(), boost_interval=BOOST)
    finally:
        event.remove(mysql_store.engine, "before_cursor_execute", capture)
    assert len(claimed) == 50
    [(statement, params)] = seen
    with mysql_store.engine.connect() as conn:
        cursor = conn.connection.cursor()
        cursor.execute("EXPLAIN " + statement, params)
        columns = [d[0] for d in cursor.description]
        plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    branches = [row for row in plan if row["table"] == "scheduler_job_queue"]
    assert len(branches) == len(JobPriority), plan
    for row in branches:
        assert row["key"] == "idx_queue_claim", plan
        assert row["type"] in ("range", "ref"), plan  # an index walk in claim order
        assert "filesort" not in (row["Extra"] or ""), plan


def test_mariadb_1011_concurrent_claimers_look_past_each_others_rows(
    mysql_store: MySQLStore, clock: FakeClock
) -> None:
    """A claim whose best candidates are held by another claimer takes the next ones."""
    jobs = [new_job(clock) for _ in range(10)]
    mysql_store.insert_jobs(jobs, now=clock.now())
    with mysql_store.engine.connect() as other:
        other.begin()
        held = other.execute(
            mysql_store._candidates(clock.now(), 4)  # the 4 oldest, locked by "another node"
        ).all()
        claimed = mysql_store.claim("n", 4, now=clock.now(), boost_interval=BOOST)
        other.rollback()
    assert len(held) == 4 and len(claimed) == 4
    assert {r.job_id for r in held}.isdisjoint({c.job_id for c in claimed})
    assert [c.job_id for c in claimed] == [j.job_id for j in jobs[4:8]]


def test_mariadb_1011_batched_updates_roll_back_as_one(
    mysql_store: MySQLStore, clock: FakeClock
) -> None:
    """The multi-statement pipeline stops at a failing statement and the transaction rolls back."""
    jobs = [new_job(clock) for _ in range(3)]
    mysql_store.insert_jobs(jobs, now=clock.now())
    statement = text("UPDATE scheduler_job_queue SET attempts = :a WHERE job_id = :id")
    params = [
        {"a": 5, "id": jobs[0].job_id.bytes},
        {"a": 2**40, "id": jobs[1].job_id.bytes},  # out of range for INT under strict mode
        {"a": 5, "id": jobs[2].job_id.bytes},
    ]
    with pytest.raises(DBAPIError), mysql_store.engine.begin() as conn:
        conn.execute(statement, params)
    with mysql_store.engine.connect() as conn:
        assert conn.execute(text("SELECT MAX(attempts) FROM scheduler_job_queue")).scalar() == 0
    with mysql_store.engine.begin() as conn:
        result = conn.execute(statement, [params[0], params[2]])
    assert result.rowcount == 2
