"""``PreparedStatement``: a statement rendered once per dialect writes exactly what SQLAlchemy's
own execution of it writes, row for row (typed values converted, constants filled in)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, create_engine, update
from sqlalchemy.dialects import postgresql

from ratchet.sql.prepared import PreparedStatement
from ratchet.sql.types import UTCMicros, UUIDType

metadata = MetaData()
things = Table(
    "things",
    metadata,
    Column("id", UUIDType(), primary_key=True),
    Column("state", String(20)),
    Column("at", UTCMicros()),
    Column("count", Integer),
    Column("note", String(50)),
)
#: Row values by name, a constant status, a constant NULL of a typed column, an expression.
MARK = (
    update(things)
    .where(things.c.id == bindparam("b_id"))
    .values(
        state="DONE",
        at=bindparam("b_at"),
        count=things.c.count + bindparam("b_add"),
        note=None,
    )
)
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _table_after(statement_runner: object) -> list[tuple[object, ...]]:
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    ids = [uuid.UUID(int=i + 1) for i in range(3)]
    with engine.begin() as conn:
        conn.execute(
            things.insert(),
            [{"id": i, "state": "NEW", "at": T0, "count": 1, "note": "x"} for i in ids],
        )
        rows = [{"b_id": ids[0], "b_at": T0 + timedelta(seconds=5), "b_add": 2},
                {"b_id": ids[2], "b_at": T0 + timedelta(microseconds=7), "b_add": 40}]  # fmt: skip
        assert statement_runner(conn, rows) == 2  # type: ignore[operator]
        return [tuple(r) for r in conn.execute(things.select().order_by(things.c.id))]


def test_rows_written_as_sqlalchemy_writes_them() -> None:
    prepared = PreparedStatement(MARK)
    ours = _table_after(lambda conn, rows: prepared.execute(conn, rows))
    theirs = _table_after(lambda conn, rows: conn.execute(MARK, rows).rowcount)
    assert ours == theirs
    assert [r[1] for r in ours] == ["DONE", "NEW", "DONE"] and ours[2][3] == 41
    assert ours[0][2] == T0 + timedelta(seconds=5) and ours[0][4] is None


def test_named_paramstyles_get_dicts_of_converted_values() -> None:
    dialect = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]
    rendering = PreparedStatement(MARK).rendering(dialect)
    [row] = rendering.driver_rows([{"b_id": uuid.UUID(int=9), "b_at": T0, "b_add": 1}])
    assert "%(b_id)s" in rendering.sql
    assert row["state"] == "DONE" and row["note"] is None and row["b_add"] == 1
    assert row["b_at"] == int(T0.timestamp() * 1_000_000)


def test_an_empty_batch_runs_nothing() -> None:
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        assert PreparedStatement(MARK).execute(conn, []) == 0  # the table does not even exist
