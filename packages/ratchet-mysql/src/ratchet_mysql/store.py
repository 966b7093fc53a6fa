"""The MySQL / MariaDB store: the shared SQL store with MySQL's differences."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url

from ratchet.sql.store import SqlStore
from ratchet_mysql.dialect import MySQLDialect

DRIVER = "pymysql"


def normalize_url(url: str) -> str:
    """``mysql://`` and ``mariadb://`` (without a driver) mean PyMySQL."""
    parsed = make_url(url)
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("mysql", "mariadb") and not driver:
        parsed = parsed.set(drivername=f"{backend}+{DRIVER}")
    return parsed.render_as_string(hide_password=False)


class MySQLStore(SqlStore):
    """:class:`~ratchet.sql.store.SqlStore` on MySQL 8 / MariaDB."""

    def __init__(
        self, url: str, dialect: MySQLDialect | None = None, **engine_options: Any
    ) -> None:
        super().__init__(normalize_url(url), dialect or MySQLDialect(), **engine_options)

    def database_time(self) -> datetime:
        """The server's UTC clock with microseconds (``CURRENT_TIMESTAMP`` has whole seconds)."""

        def work(conn: Connection) -> datetime:
            value = conn.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]

        return self._run(work, write=False)
