"""PostgreSQL test fixtures: a fresh, migrated database per test, cloned from a template.

The session builds ``ratchet_tpl_<pid>`` once (``store.migrate()``, exactly what
``ratchet db upgrade`` does); a test gets ``CREATE DATABASE t_<random> TEMPLATE ...``. Cloning
costs a checkpoint (~0.3 s), so a database a test leaves behind is recycled instead when its
schema is still exactly the template's: other sessions on it are terminated and every table
except the migration version table is truncated, which leaves it indistinguishable from a fresh
clone for the store (~20 ms). A database whose schema a test changed is dropped. Import the
fixtures into a ``conftest.py``::

    from pg_fixtures import (  # noqa: F401
        postgres_admin,
        postgres_coordinator_backend,
        postgres_database_pool,
        postgres_store_url,
        postgres_template,
    )
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from ratchet.testing.pytest_plugin import backend_unavailable


def database_url(server_url: str, database: str) -> str:
    """``server_url`` with its database replaced (SQLAlchemy URL, password kept)."""
    return make_url(server_url).set(database=database).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """A libpq URI for a SQLAlchemy ``postgresql+psycopg://`` URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresAdmin:
    """Creates and drops databases over one autocommit maintenance connection."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.conninfo = libpq_url(database_url(server_url, "postgres"))
        self.conn = psycopg.connect(self.conninfo, autocommit=True)

    def execute(self, stmt: sql.Composable | str, params: tuple[Any, ...] | None = None) -> None:
        """Run ``stmt``, reconnecting once if the server was restarted meanwhile."""
        try:
            self.conn.execute(stmt, params)
        except psycopg.OperationalError:
            if not self.conn.closed and not self.conn.broken:
                raise
            self.conn = psycopg.connect(self.conninfo, autocommit=True)
            self.conn.execute(stmt, params)

    def create(self, name: str, template: str | None = None) -> str:
        """Create database ``name`` (optionally from ``template``); return its SQLAlchemy URL."""
        stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            stmt = sql.SQL("{} TEMPLATE {} STRATEGY FILE_COPY").format(
                stmt, sql.Identifier(template)
            )
        self.execute(stmt)
        return database_url(self.server_url, name)

    def drop(self, name: str) -> None:
        """Drop ``name``, disconnecting anyone still connected."""
        self.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def close(self) -> None:
        self.conn.close()


#: Objects of the public schema (tables, indexes, constraints) and the migration version(s).
_FINGERPRINT = """
SELECT md5(coalesce((SELECT string_agg(c.relname || ':' || c.relkind::text, ',' ORDER BY c.relname)
                     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'public'), '')
           || '|' || coalesce((SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
                               WHERE connamespace = 'public'::regnamespace), '')
           || '|' || coalesce((SELECT string_agg(version_num, ',' ORDER BY version_num)
                               FROM ratchet_alembic_version), ''))
"""
_TABLES = """
SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables
WHERE schemaname = 'public' AND tablename <> 'ratchet_alembic_version'
"""


class DatabasePool:
    """Fresh clones of the template, recycled by truncation when a test left the schema intact."""

    def __init__(self, admin: PostgresAdmin, template: str) -> None:
        self.admin = admin
        self.template = template
        self.idle: list[str] = []
        self.fingerprint = self._fingerprint(database_url(admin.server_url, template))

    @staticmethod
    def _fingerprint(url: str) -> str:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            row = conn.execute(_FINGERPRINT).fetchone()
        assert row is not None
        return str(row[0])

    def acquire(self) -> tuple[str, str]:
        """A (name, url) of an empty migrated database."""
        if self.idle:
            name = self.idle.pop()
            return name, database_url(self.admin.server_url, name)
        name = f"t_{uuid.uuid4().hex[:16]}"
        return name, self.admin.create(name, template=self.template)

    def release(self, name: str) -> None:
        """Recycle ``name`` if its schema is untouched, else drop it."""
        url = database_url(self.admin.server_url, name)
        try:
            self.admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            with psycopg.connect(libpq_url(url), autocommit=True) as conn:
                row = conn.execute(_FINGERPRINT).fetchone()
                if row is None or row[0] != self.fingerprint:
                    raise LookupError("schema changed by the test")
                tables = conn.execute(_TABLES).fetchone()
                if tables and tables[0]:
                    conn.execute(f"TRUNCATE {tables[0]} CASCADE")
        except (psycopg.Error, LookupError):
            with contextlib.suppress(psycopg.Error):
                self.admin.drop(name)
            return
        self.idle.append(name)

    def close(self) -> None:
        while self.idle:
            with contextlib.suppress(psycopg.Error):
                self.admin.drop(self.idle.pop())


@pytest.fixture(scope="session")
def postgres_admin(request: pytest.FixtureRequest, postgres_server: Any) -> Iterator[PostgresAdmin]:
    """A maintenance connection to the session's PostgreSQL server."""
    try:
        admin = PostgresAdmin(postgres_server.url())
    except psycopg.Error as exc:
        backend_unavailable(request.config, "postgres", f"cannot connect as admin: {exc}")
    yield admin
    admin.close()


@pytest.fixture(scope="session")
def postgres_template(postgres_admin: PostgresAdmin) -> Iterator[str]:
    """Name of a database migrated to the newest schema, built once per session."""
    from ratchet_postgres.store import PostgresStore

    name = f"ratchet_tpl_{os.getpid()}"
    postgres_admin.drop(name)
    url = postgres_admin.create(name)
    store = PostgresStore(url)
    try:
        store.migrate()
    finally:
        store.close()  # no session may stay connected to a template
    yield name
    postgres_admin.drop(name)


@pytest.fixture(scope="session")
def postgres_database_pool(
    postgres_admin: PostgresAdmin, postgres_template: str
) -> Iterator[DatabasePool]:
    """Clones of the template for ``postgres_store_url``."""
    pool = DatabasePool(postgres_admin, postgres_template)
    yield pool
    pool.close()


@pytest.fixture
def postgres_store_url(postgres_database_pool: DatabasePool) -> Iterator[str]:
    """URL of a fresh, migrated, empty database for this test."""
    name, url = postgres_database_pool.acquire()
    yield url
    postgres_database_pool.release(name)


@pytest.fixture
def postgres_empty_url(postgres_admin: PostgresAdmin) -> Iterator[str]:
    """URL of a fresh database with no schema at all (dropped afterwards)."""
    name = f"e_{uuid.uuid4().hex[:16]}"
    url = postgres_admin.create(name)
    yield url
    with contextlib.suppress(psycopg.Error):
        postgres_admin.drop(name)


@pytest.fixture
def postgres_coordinator_backend(postgres_server: Any) -> Iterator[Any]:
    """LISTEN/NOTIFY nodes on a channel of their own (fast reconnects for the restart case)."""
    from ratchet.testing.coordinator_contract import CoordinatorBackend, NodeFactory
    from ratchet_postgres.coordinator import PostgresClusterCoordinator

    url = postgres_server.url()
    channel = f"ratchet_contract_{uuid.uuid4().hex[:12]}"
    broker = postgres_server if hasattr(postgres_server, "restart") else None

    def make() -> PostgresClusterCoordinator:
        node = PostgresClusterCoordinator(url, channel=channel, max_backoff=0.5)
        node.wait_connected(10.0)
        return node

    with NodeFactory(make) as factory:
        yield CoordinatorBackend(factory, broker)


def through_pgbouncer(url: str, pgbouncer: Any, mode: str = "transaction") -> str:
    """``url`` (a database on the test server) reached through ``pgbouncer`` instead, with the
    store's ``pgbouncer`` switch."""
    parsed = make_url(url).set(host=pgbouncer.host, port=pgbouncer.port)
    parsed = parsed.update_query_dict({"pgbouncer": mode})
    return parsed.render_as_string(hide_password=False)


@pytest.fixture
def pgbouncer_store_url(postgres_store_url: str, pgbouncer_server: Any) -> str:
    """``postgres_store_url``'s database through the session's PgBouncer (transaction pooling)."""
    return through_pgbouncer(postgres_store_url, pgbouncer_server)
