"""A driver statement run through libpq, prepared by name once per connection."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import create_engine

from pg_fixtures import libpq_url
from ratchet_postgres.named_statement import NamedStatement

pytestmark = pytest.mark.postgres

INSERT = "INSERT INTO note (id, body) SELECT CAST(%(id)s AS int), %(body)s || '%%' || %(body)s"


@pytest.fixture
def conn(postgres_store_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(libpq_url(postgres_store_url), autocommit=True) as c:
        c.execute("CREATE TABLE note (id int PRIMARY KEY, body text)")
        yield c


def prepared_names(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements").fetchall()]


def bodies(conn: psycopg.Connection) -> list[tuple[int, str]]:
    return [(r[0], r[1]) for r in conn.execute("SELECT id, body FROM note ORDER BY id")]


def test_the_statement_is_prepared_once_and_commits_on_its_own(conn: psycopg.Connection) -> None:
    conn.autocommit = False  # as a pooled connection is: the statement still commits
    statement = NamedStatement(INSERT)
    assert statement.parameters == ("id", "body")
    assert statement.execute(conn, {"id": 1, "body": "a"}) == 1
    assert statement.execute(conn, {"id": 2, "body": "b"}) == 1
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    conn.autocommit = True
    assert prepared_names(conn) == [statement.name.decode()]
    assert bodies(conn) == [(1, "a%a"), (2, "b%b")]


def test_a_statement_the_server_forgot_is_prepared_again(conn: psycopg.Connection) -> None:
    statement = NamedStatement(INSERT)
    statement.execute(conn, {"id": 1, "body": "a"})
    conn.execute("DEALLOCATE ALL")
    assert statement.execute(conn, {"id": 2, "body": "b"}) == 1
    assert [i for i, _ in bodies(conn)] == [1, 2]


def test_an_error_is_psycopgs_own_and_the_connection_stays_usable(
    conn: psycopg.Connection,
) -> None:
    statement = NamedStatement(INSERT)
    statement.execute(conn, {"id": 1, "body": "a"})
    with pytest.raises(psycopg.errors.UniqueViolation) as raised:
        statement.execute(conn, {"id": 1, "body": "again"})
    assert raised.value.diag.constraint_name == "note_pkey"
    assert statement.execute(conn, {"id": 2, "body": "b"}) == 1
    assert bodies(conn) == [(1, "a%a"), (2, "b%b")]


def test_without_named_statements_it_runs_through_a_cursor(postgres_store_url: str) -> None:
    """psycopg's ``prepare_threshold=None`` (the store's setting behind PgBouncer in
    transaction pooling mode) means no statement may be prepared by name."""
    with psycopg.connect(
        libpq_url(postgres_store_url), autocommit=True, prepare_threshold=None
    ) as conn:
        conn.execute("CREATE TABLE note (id int PRIMARY KEY, body text)")
        statement = NamedStatement(INSERT)
        for i in range(3):
            assert statement.execute(conn, {"id": i, "body": "x"}) == 1
        assert prepared_names(conn) == []
        assert len(bodies(conn)) == 3


def test_through_a_cursor_it_still_commits_on_its_own(postgres_store_url: str) -> None:
    """On an idle connection with autocommit off, the cursor path (no named statements) commits
    the statement too, and leaves the flag as it found it."""
    with psycopg.connect(
        libpq_url(postgres_store_url), autocommit=True, prepare_threshold=None
    ) as conn:
        conn.execute("CREATE TABLE note (id int PRIMARY KEY, body text)")
        conn.autocommit = False
        assert NamedStatement(INSERT).execute(conn, {"id": 1, "body": "a"}) == 1
        assert conn.autocommit is False
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        conn.rollback()  # would undo an uncommitted insert
        conn.autocommit = True
        assert bodies(conn) == [(1, "a%a")]


def test_inside_a_transaction_it_joins_the_transaction(conn: psycopg.Connection) -> None:
    statement = NamedStatement(INSERT)
    with conn.transaction(force_rollback=True):
        assert statement.execute(conn, {"id": 1, "body": "a"}) == 1
    assert bodies(conn) == []


def test_a_lost_connection_raises_an_operational_error_sqlalchemy_sees_as_a_disconnect(
    conn: psycopg.Connection, postgres_store_url: str
) -> None:
    statement = NamedStatement(INSERT)
    statement.execute(conn, {"id": 1, "body": "a"})
    with psycopg.connect(libpq_url(postgres_store_url), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError) as raised:
        statement.execute(conn, {"id": 2, "body": "b"})
    dialect = create_engine("postgresql+psycopg://").dialect
    assert dialect.is_disconnect(raised.value, conn, None)


def test_a_value_without_a_text_form_is_refused_before_anything_is_sent(
    conn: psycopg.Connection,
) -> None:
    with pytest.raises(TypeError, match="float"):
        NamedStatement(INSERT).execute(conn, {"id": 1.5, "body": "a"})
    assert prepared_names(conn) == []


def test_a_session_that_has_the_statement_already_runs_it(conn: psycopg.Connection) -> None:
    """A server connection can come with the statement prepared (PgBouncer in session pooling
    hands on a session without resetting it): the name is derived from the text, so it is
    the same statement and runs."""
    statement = NamedStatement(INSERT)
    conn.pgconn.prepare(statement.name, statement.sql)
    assert statement.execute(conn, {"id": 1, "body": "a"}) == 1
    assert bodies(conn) == [(1, "a%a")]


RETURNING = (
    "INSERT INTO note (id, body) SELECT CAST(%(id)s AS int), array_to_string(CAST(%(tags)s AS"
    " text[]), '|') WHERE CAST(%(keep)s AS boolean)"
    " RETURNING id, body, gen_random_uuid() AS token, NULL::int AS nothing, id > 1 AS later"
)


@pytest.mark.parametrize("prepared", [True, False], ids=["by-name", "through-a-cursor"])
def test_fetch_returns_rows_loaded_as_a_cursor_loads_them(
    conn: psycopg.Connection, prepared: bool
) -> None:
    """Rows come back as tuples of Python values (uuid, int, text, bool, None); a list of
    strings goes in as ``text[]`` whatever its quotes and backslashes; a bool as a boolean."""
    import uuid

    if not prepared:
        conn.prepare_threshold = None  # as behind PgBouncer in transaction pooling
    conn.autocommit = False
    statement = NamedStatement(RETURNING)
    tags = ['a"b', "c\\d", "e,f", "{g}", ""]
    [(id_, body, token, nothing, later)] = statement.fetch(
        conn, {"id": 2, "tags": tags, "keep": True}
    )
    assert (id_, body, nothing, later) == (2, "|".join(tags), None, True)
    assert isinstance(token, uuid.UUID)
    assert statement.columns == ("id", "body", "token", "nothing", "later")
    assert statement.fetch(conn, {"id": 3, "tags": [], "keep": False}) == []
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # committed
    conn.autocommit = True
    assert bodies(conn) == [(2, "|".join(tags))]
    assert (prepared_names(conn) == [statement.name.decode()]) is prepared


def plans(conn: psycopg.Connection, statement: NamedStatement) -> tuple[int, int]:
    """(generic, custom) plans the session made for ``statement``."""
    row = conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = %s",
        (statement.name.decode(),),
    ).fetchone()
    assert row is not None, "not prepared on this session"
    return int(row[0]), int(row[1])


def test_a_statement_planned_per_call_never_gets_a_generic_plan(conn: psycopg.Connection) -> None:
    """Prepared by name but planned at every call, however often it runs and though its
    generic plan would be as cheap as its custom ones (an analyzed empty table, where the
    server would switch to a generic plan after five calls); the plan mode is set for the
    call's own transaction only. It commits on its own and fails as any prepared statement;
    inside a transaction it joins it through a cursor that does not prepare."""
    conn.execute("ANALYZE note")
    fetch = NamedStatement(
        "SELECT id FROM note WHERE id >= %(low)s ORDER BY id", planned_per_call=True
    )
    ordinary = NamedStatement("SELECT id FROM note WHERE id >= %(low)s ORDER BY id LIMIT 5")
    conn.autocommit = False
    for _ in range(8):  # more calls than the server's five before a generic plan
        assert fetch.fetch(conn, {"low": 0}) == []
        assert ordinary.fetch(conn, {"low": 0}) == []
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    conn.autocommit = True
    assert plans(conn, fetch) == (0, 8)
    assert plans(conn, ordinary)[0] > 0  # what the mode prevents
    assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)

    insert = NamedStatement(INSERT, planned_per_call=True)
    conn.autocommit = False
    for i in range(7):
        assert insert.execute(conn, {"id": i, "body": "x"}) == 1
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with pytest.raises(psycopg.errors.UniqueViolation):
        insert.execute(conn, {"id": 0, "body": "again"})
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert [r[0] for r in fetch.fetch(conn, {"low": 5})] == [5, 6]  # the connection still works
    with conn.transaction():
        assert [r[0] for r in fetch.fetch(conn, {"low": 5})] == [5, 6]
        assert insert.execute(conn, {"id": 7, "body": "y"}) == 1
    conn.autocommit = True
    assert plans(conn, insert) == (0, 8)  # the seven and the refused one; none in the transaction
    assert len(bodies(conn)) == 8


def test_a_statement_planned_per_call_is_prepared_again_when_the_server_forgot_it(
    conn: psycopg.Connection,
) -> None:
    """``DISCARD ALL`` (a pooler's reset) drops the statement and the plan-mode statement run
    before it: both are prepared again."""
    fetch = NamedStatement("SELECT count(*) FROM note WHERE id > %(low)s", planned_per_call=True)
    assert fetch.fetch(conn, {"low": 0}) == [(0,)]
    conn.execute("DISCARD ALL")
    assert fetch.fetch(conn, {"low": 0}) == [(0,)]
    assert plans(conn, fetch) == (0, 1)


def test_a_statement_planned_per_call_needs_parameters() -> None:
    """The server always reuses one plan for a prepared statement without parameters."""
    with pytest.raises(ValueError, match="parameters"):
        NamedStatement("SELECT count(*) FROM note", planned_per_call=True)


def test_a_statement_planned_per_call_on_a_lost_connection_raises_an_operational_error(
    conn: psycopg.Connection, postgres_store_url: str
) -> None:
    fetch = NamedStatement("SELECT count(*) FROM note WHERE id > %(low)s", planned_per_call=True)
    fetch.fetch(conn, {"low": 0})
    with psycopg.connect(libpq_url(postgres_store_url), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError) as raised:
        fetch.fetch(conn, {"low": 0})
    dialect = create_engine("postgresql+psycopg://").dialect
    assert dialect.is_disconnect(raised.value, conn, None)
