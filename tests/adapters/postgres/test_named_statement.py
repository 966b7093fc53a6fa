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


def test_a_statement_planned_per_call_is_never_prepared(conn: psycopg.Connection) -> None:
    """Sent with its text at every call: nothing is prepared on the session (so the server never
    keeps a generic plan for it), it commits on its own and fails as a prepared one does; inside
    a transaction it joins it through a cursor that does not prepare either."""
    statement = NamedStatement(INSERT, planned_per_call=True)
    conn.autocommit = False
    for i in range(7):  # more calls than psycopg's and the server's thresholds
        assert statement.execute(conn, {"id": i, "body": "x"}) == 1
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with pytest.raises(psycopg.errors.UniqueViolation):
        statement.execute(conn, {"id": 0, "body": "again"})
    fetch = NamedStatement(
        "SELECT id FROM note WHERE id >= %(low)s ORDER BY id", planned_per_call=True
    )
    with conn.transaction():
        assert [r[0] for _ in range(7) for r in fetch.fetch(conn, {"low": 5})][-2:] == [5, 6]
    conn.autocommit = True
    assert prepared_names(conn) == []
    assert len(bodies(conn)) == 7
