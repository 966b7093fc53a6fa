"""Statements of the submit path, compiled once per engine and run with driver-ready values.

Building a SQLAlchemy statement, computing its cache key and processing every bound value of every
row cost more than SQLite's own insert, and as much as a PostgreSQL round trip. The submit path
inserts the same few shapes over and over, so it renders each shape once for the engine's dialect
and hands the driver plain tuples through ``Connection.exec_driver_sql``, which still runs the
engine's events, error wrapping and transaction handling.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Table, bindparam, insert, select
from sqlalchemy.engine import Connection, Dialect

from ratchet.sql.types import UUIDType


class PreparedInsert:
    """``INSERT INTO <table> (<columns>) VALUES (...)`` for one dialect.

    Rows are tuples in ``columns`` order (which must be the table's), already converted to what the driver takes (see
    :func:`uuid_binder`; times as integer microseconds).
    """

    def __init__(
        self, dialect: Dialect, table: Table, columns: Sequence[str], suffix: str = ""
    ) -> None:
        compiled = insert(table).compile(dialect=dialect, column_keys=list(columns))
        self.table = table
        self.columns = tuple(columns)
        self.sql = str(compiled) + (f" {suffix}" if suffix else "")
        #: Bind names of a named paramstyle (psycopg, PyMySQL); None when positional (SQLite).
        self.names: tuple[str, ...] | None = None if compiled.positional else self.columns
        if compiled.positional and tuple(compiled.positiontup or ()) != self.columns:
            raise ValueError(f"columns must be given in table order, not {columns}")

    def params(self, rows: Sequence[tuple[Any, ...]]) -> Sequence[Any]:
        """``rows`` in the driver's paramstyle."""
        if self.names is None:
            return rows
        names = self.names
        return [dict(zip(names, row, strict=True)) for row in rows]

    def execute(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> int:
        """Insert ``rows`` (one ``executemany``; nothing when empty); returns the row count."""
        if not rows:
            return 0
        return conn.exec_driver_sql(self.sql, self.params(rows)).rowcount


class PreparedStatement:
    """A statement whose per-row values are required bind parameters, rendered once per
    dialect and run with many rows: each row (a mapping of those names) goes to the driver as a
    plain tuple or dict, every value through its type's bind processor, the statement's own
    constants filled in. It skips SQLAlchemy's per-row parameter building, which costs more than
    SQLite's own update of a row."""

    def __init__(self, statement: Any) -> None:
        self.statement = statement
        self._rendered: dict[Dialect, _Rendering] = {}

    def rendering(self, dialect: Dialect) -> _Rendering:
        """The statement rendered for ``dialect`` (each engine has its dialect object; a
        process has one or a few, a test run many: the first eight are kept)."""
        found = self._rendered.get(dialect)
        if found is None:
            found = _Rendering(dialect, self.statement)
            if len(self._rendered) >= 8:
                self._rendered = {}
            self._rendered[dialect] = found
        return found

    def execute(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Run the statement once per row (one ``executemany``; nothing when empty); returns
        the row count the driver reports."""
        if not rows:
            return 0
        rendering = self.rendering(conn.dialect)
        return conn.exec_driver_sql(rendering.sql, rendering.driver_rows(rows)).rowcount


class _Rendering:
    """A :class:`PreparedStatement` for one dialect: its SQL and how a row becomes the driver's."""

    def __init__(self, dialect: Dialect, statement: Any) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        binds = compiled.binds
        constants = compiled.construct_params(_check=False)
        order: Sequence[str] = (
            tuple(compiled.positiontup or ()) if compiled.positional else tuple(constants)
        )
        slots = []
        for name in order:
            process = binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            if binds[name].required:
                slots.append((name, process, True, None))
            else:  # a constant of the statement, converted once
                value = constants.get(name)
                slots.append((name, None, False, value if process is None else process(value)))
        #: (name, bind processor or None, whether the row gives the value, the constant value)
        self._slots = tuple(slots)
        self._names = None if compiled.positional else tuple(slot[0] for slot in slots)

    def driver_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
        slots, names = self._slots, self._names
        out: list[Any] = []
        for row in rows:
            values = [
                (row[name] if process is None else process(row[name])) if given else constant
                for name, process, given, constant in slots
            ]
            out.append(tuple(values) if names is None else dict(zip(names, values, strict=True)))
        return out


class PreparedKeyLookup:
    """``SELECT <key>, <id> FROM <table> WHERE <key> IN (...)``, one rendering per list length.

    Returns ``{key: uuid}``.
    """

    def __init__(self, dialect: Dialect, table: Table, key: str, value: str) -> None:
        self.dialect = dialect
        self.table = table
        self.key = key
        self.value = value
        self._rendered: dict[int, tuple[str, tuple[str, ...] | None]] = {}
        self._to_uuid = table.c[value].type.process_result_value  # type: ignore[attr-defined]

    def _render(self, n: int) -> tuple[str, tuple[str, ...] | None]:
        found = self._rendered.get(n)
        if found is None:
            names = tuple(f"k{i}" for i in range(n))
            col = self.table.c[self.key]
            stmt = select(col, self.table.c[self.value]).where(
                col.in_([bindparam(name, type_=col.type) for name in names])
            )
            compiled = stmt.compile(dialect=self.dialect)
            found = (str(compiled), None if compiled.positional else names)
            if len(self._rendered) < 64:  # bulk submissions use a handful of lengths
                self._rendered[n] = found
        return found

    def fetch(self, conn: Connection, keys: Sequence[str]) -> dict[str, uuid.UUID]:
        if not keys:
            return {}
        sql, names = self._render(len(keys))
        params: Any = tuple(keys) if names is None else dict(zip(names, keys, strict=True))
        rows = conn.exec_driver_sql(sql, params).all()
        convert = self._to_uuid
        dialect = self.dialect
        return {row[0]: convert(row[1], dialect) for row in rows}


def uuid_binder(dialect: Dialect) -> Callable[[uuid.UUID], Any]:
    """What the driver takes for a :class:`uuid.UUID` in a :class:`UUIDType` column.

    The same conversion as ``UUIDType.process_bind_param`` for a ``uuid.UUID`` value, minus the
    per-call checks: use it only for values that are ``uuid.UUID`` instances.
    """
    kind = UUIDType.storage(dialect)
    if kind == "native":
        return _identity
    if kind == "bytes":
        return operator.attrgetter("bytes")
    return operator.attrgetter("hex")


def _identity(value: uuid.UUID) -> Any:
    return value
