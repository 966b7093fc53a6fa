"""Django's database connection as SQLAlchemy sees it.

Ratchet's store writes with SQLAlchemy Core. To write a job in the transaction Django has open,
the store gets a SQLAlchemy ``Connection`` over Django's own DB-API connection: an engine whose
pool hands out that one connection and whose dialect never commits, rolls back or closes it
(Django owns its transaction and its connection). Django's ``transaction.on_commit`` carries what
follows the submission (events, wakeups).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Engine
from sqlalchemy.pool import StaticPool

from ratchet.sql.caller_tx import ExternalTransaction

#: Django database engines Ratchet can share a database with: the SQLAlchemy dialect names.
DIALECTS = {
    "django.db.backends.postgresql": "postgresql",
    "django.db.backends.mysql": "mysql",
    "django.db.backends.sqlite3": "sqlite",
}


def _dialect(alias: str) -> str:
    engine = connections.databases[alias]["ENGINE"]
    dialect = DIALECTS.get(engine)
    if dialect is None:
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}] uses {engine}; Ratchet shares a database with Django on "
            f"{', '.join(sorted(DIALECTS))} only"
        )
    return dialect


def store_url(alias: str) -> str:
    """The SQLAlchemy URL of the database behind ``DATABASES[alias]`` (what Ratchet's own
    connections, the worker's, use).

    :raises ImproperlyConfigured: an unsupported engine, or an in-memory SQLite database (no
        second connection could see it).
    """
    db = connections.databases[alias]
    dialect = _dialect(alias)
    name = str(db.get("NAME") or "")
    if dialect == "sqlite":
        if not name or name == ":memory:" or name.startswith("file::memory:"):
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}] is an in-memory SQLite database; Ratchet's worker needs "
                "a database file it can open too"
            )
        return URL.create("sqlite", database=name).render_as_string(hide_password=False)
    driver = "psycopg" if dialect == "postgresql" else "mysqldb"
    port = db.get("PORT")
    url = URL.create(
        f"{dialect}+{driver}",
        username=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=int(port) if port else None,
        database=name or None,
    )
    return url.render_as_string(hide_password=False)


def _bridge_driver(alias: str, raw: Any) -> str:
    """The SQLAlchemy ``dialect+driver`` that matches Django's DB-API module."""
    dialect = _dialect(alias)
    module = type(raw).__module__.split(".")[0]
    drivers = {
        ("postgresql", "psycopg"): "postgresql+psycopg",
        ("postgresql", "psycopg2"): "postgresql+psycopg2",
        ("mysql", "MySQLdb"): "mysql+mysqldb",
        ("sqlite", "sqlite3"): "sqlite+pysqlite",
    }
    found = drivers.get((dialect, module))
    if found is None:
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}] connects with {module}, which Ratchet cannot share"
        )
    return found


def _noop(*_: Any) -> None:
    return None


def _bridge_engine(url: str, raw: Any) -> Engine:
    """An engine whose only connection is ``raw`` and that never ends its transaction."""
    engine = create_engine(
        url, creator=lambda: raw, poolclass=StaticPool, pool_reset_on_return=None
    )
    # Django commits, rolls back and closes this connection; SQLAlchemy must not.
    for name in ("do_commit", "do_rollback", "do_close"):
        setattr(engine.dialect, name, _noop)
    return engine


_engines: weakref.WeakKeyDictionary[Any, tuple[Any, Engine]] = weakref.WeakKeyDictionary()


def bridge_engine(alias: str) -> Engine:
    """The bridge engine over the current thread's connection of ``alias`` (connecting it)."""
    wrapper = connections[alias]
    wrapper.ensure_connection()
    raw = wrapper.connection
    cached = _engines.get(wrapper)
    if cached is not None and cached[0] is raw:
        return cached[1]
    engine = _bridge_engine(f"{_bridge_driver(alias, raw)}://", raw)
    _engines[wrapper] = (raw, engine)
    return engine


@contextmanager
def joined_transaction(alias: str) -> Iterator[ExternalTransaction]:
    """Django's transaction on ``alias`` as something ``submit(connection=...)`` joins.

    Opens ``transaction.atomic(using=alias)``: a savepoint inside the caller's atomic block, or
    a transaction of its own outside one (so a job's rows are never written half).
    """
    with transaction.atomic(using=alias), bridge_engine(alias).connect() as conn:
        yield ExternalTransaction(
            connection=conn,
            on_commit=lambda callback: transaction.on_commit(callback, using=alias),
        )


#: SQLAlchemy backend name -> Django database engine.
DJANGO_ENGINES = {
    "postgresql": "django.db.backends.postgresql",
    "mysql": "django.db.backends.mysql",
    "mariadb": "django.db.backends.mysql",
    "sqlite": "django.db.backends.sqlite3",
}


def django_database(url: str, **extra: Any) -> dict[str, Any]:
    """A ``DATABASES`` entry for a SQLAlchemy URL (``postgresql+psycopg://u:p@h:5432/db``,
    ``mysql+pymysql://...``, ``sqlite:///path``); ``extra`` keys are added as given.

    :raises ImproperlyConfigured: a database Django and Ratchet cannot share.
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    engine = DJANGO_ENGINES.get(parsed.get_backend_name())
    if engine is None:
        raise ImproperlyConfigured(
            f"{parsed.get_backend_name()!r} URLs have no Django engine Ratchet can share; "
            f"use one of {sorted(DJANGO_ENGINES)}"
        )
    entry: dict[str, Any] = {"ENGINE": engine, "NAME": parsed.database or ""}
    if engine != "django.db.backends.sqlite3":
        entry.update(
            USER=parsed.username or "",
            PASSWORD=parsed.password or "",
            HOST=parsed.host or "",
            PORT=str(parsed.port or ""),
        )
    entry.update(extra)
    return entry
