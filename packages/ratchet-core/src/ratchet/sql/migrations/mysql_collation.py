"""Exact comparison for text keys on MySQL / MariaDB, shared by the migrations that need it.

A MySQL table takes its database's default collation, usually case- and accent-insensitive and
blind to trailing spaces. Key, tag and name columns get a binary collation without padding
instead, so that they compare byte for byte as on PostgreSQL and SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from alembic import op

#: Preferred binary collations, best first (the first one the server has is used).
COLLATIONS = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin", "utf8mb4_bin")

Column = tuple[str, str, str, bool]
"""(table, column, SQL type, nullable)."""


def is_mysql() -> bool:
    """Whether the migration runs on MySQL or MariaDB."""
    return op.get_context().dialect.name in ("mysql", "mariadb")


def binary_collation() -> str:
    """The best binary collation this server has."""
    names = ", ".join(f"'{c}'" for c in COLLATIONS)
    found = {
        row[0]
        for row in op.get_bind().execute(
            sa.text(
                "SELECT COLLATION_NAME FROM information_schema.COLLATIONS"
                f" WHERE COLLATION_NAME IN ({names})"
            )
        )
    }
    return next(c for c in COLLATIONS if c in found or c == COLLATIONS[-1])


def set_collation(columns: Iterable[Column], collation: str | None) -> None:
    """Give ``columns`` ``collation`` (None: back to the table's default), one ALTER per table."""
    by_table: dict[str, list[str]] = {}
    for table, column, sql_type, nullable in columns:
        charset = f" CHARACTER SET utf8mb4 COLLATE {collation}" if collation else ""
        null = "NULL" if nullable else "NOT NULL"
        by_table.setdefault(table, []).append(f"MODIFY `{column}` {sql_type}{charset} {null}")
    for table, clauses in by_table.items():
        op.execute(f"ALTER TABLE `{table}` " + ", ".join(clauses))
