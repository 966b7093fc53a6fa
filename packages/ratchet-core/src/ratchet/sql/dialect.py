"""What differs between databases, and nothing else.

The shared :class:`~ratchet.sql.store.SqlStore` holds the logic. A database differs from it in
two places, both narrow:

* a :class:`SqlDialect` (this module) supplies engine setup (``engine_kwargs``,
  ``configure_engine``, ``separate_write_engine``, ``ping_idle_after``), the locking clauses
  (``lock_for_claim``: skip rows others hold; ``lock_rows``: wait for them), how a list of ids is
  bound (``in_values``, ``id_list_chunk``), how an insert skips
  taken idempotency keys (``skip_duplicate_keys_clause``), the migration lock and migrations of
  its own (``migration_lock``, ``migration_locations``) and what an error means (``classify``);
  every statement the shared store builds goes through these.
* the statement sets of the three hot paths (:mod:`ratchet.sql.hotpaths`): how the claim, the
  insert of a batch and the fenced outcome write are rendered and executed. The generic sets
  are SQLAlchemy Core; a store for one database returns its own subclasses from
  ``SqlStore.make_hot_paths`` and overrides only their rendering hooks
  (``ClaimStatements.candidates`` / ``lock`` / ``take``, ``InsertStatements.insert_rows``,
  ``OutcomeStatements.owned`` / ``apply``), or a whole path where one statement does all of it
  (``ClaimStatements.claim``, ``InsertStatements.insert``, ``OutcomeStatements.write``). The
  logic around them stays in the shared store, once: the claim order and the check that the
  claimed rows did not change under the claim's lock, which job of a batch owns each key and
  every job's result, what each outcome writes (``plan_outcomes``), the partition of a batch
  into applied and fenced outcomes and the outcome hooks (``SqlStore._record``).

A rendering must return what the generic set returns and leave the same rows; every value is a
bound parameter or a literal made by the driver's own escaping function (only constants of the
code, statuses and outcome kinds, are written as they are). The shipped suite
:class:`ratchet.testing.dialect_contract.DialectEquivalenceContract` checks that on a real
server, path by path, against the generic sets on the same database;
:class:`ratchet.testing.store_contract.StoreContract` checks the store's behaviour as a whole.
See ``docs/writing-a-store-adapter.md``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import ColumnElement, Select
from sqlalchemy.engine import Connection, Engine


class ErrorKind(enum.Enum):
    """How the store should react to a database error."""

    DUPLICATE_IDEMPOTENCY_KEY = "duplicate idempotency key"
    DUPLICATE_JOB_ID = "duplicate job id (the key of a job keyed by its own id)"
    DUPLICATE_BUSINESS_KEY = "duplicate business key"
    RETRYABLE = "retryable (deadlock, serialization failure, lock timeout, busy)"
    TRANSIENT = "transient (connection lost or refused)"
    CONNECTION_LIMIT = "connection refused: the server's connection limit is reached"
    OTHER = "other"


class SqlDialect:
    """Base dialect: portable SQL, no row locks (the database serialises writers)."""

    name = "generic"
    skip_locked = False
    multi_host = True
    ping_idle_after: float | None = None
    """Ping a pooled connection before use once it sat idle this long (seconds); None: never
    (an embedded database cannot go away under a connection)."""
    switches_autocommit = False
    """Whether :meth:`set_autocommit` works: single-statement work then runs on a pooled
    connection switched to autocommit (no ``BEGIN`` / ``COMMIT``); else in a transaction."""
    migration_locations: tuple[str, ...] = ()
    """Directories of Alembic revisions that the dialect's own package ships, applied after
    ratchet-core's (each a branch of its own; ``heads`` includes them)."""
    driver_begin: str | None = None
    """The statement that opens a write transaction on a bare driver connection that is in
    autocommit mode (None: the dialect's writes never run on one). With it, a submission
    outside a caller's transaction runs its inserts without a SQLAlchemy ``Connection``
    (:meth:`~ratchet.sql.hotpaths.InsertStatements.driver_insert`)."""

    def engine_kwargs(self, url: str) -> dict[str, Any]:
        """Extra keyword arguments for ``create_engine``."""
        return {}

    def configure_engine(self, engine: Engine, *, write: bool) -> None:
        """Install event listeners on a freshly created engine."""

    def close(self) -> None:
        """Release what :meth:`configure_engine` started (the store is closing; its engines
        are disposed of already)."""

    def set_autocommit(self, dbapi_connection: Any, on: bool) -> None:
        """Switch a driver connection, idle outside a transaction, to autocommit or back,
        without a round trip (only called when :attr:`switches_autocommit`)."""
        raise NotImplementedError

    def separate_write_engine(self) -> bool:
        """Whether writes need their own engine (SQLite: ``BEGIN IMMEDIATE``)."""
        return False

    def skip_duplicate_keys_clause(self, dialect_name: str) -> str | None:
        """What to append to an ``INSERT ... VALUES`` so rows whose primary key is taken are
        skipped, not an error, with the row count telling how many went in (None: unsupported;
        the store then looks the keys up before inserting)."""
        return None

    id_list_chunk = 500
    """At most this many values in one :meth:`in_values` condition (the store splits longer
    lists into several statements)."""

    def in_values(self, column: Any, values: Sequence[Any]) -> ColumnElement[bool]:
        """``column`` is one of ``values``, bound as parameters: an ``IN`` list here, one
        parameter each."""
        return column.in_(list(values))  # type: ignore[no-any-return]

    def lock_for_claim(self, stmt: Select[Any]) -> Select[Any]:
        """Make a candidate select lock its rows, skipping rows others hold."""
        return stmt

    def lock_rows(self, stmt: Select[Any]) -> Select[Any]:
        """Make a select lock its rows for the rest of the transaction (waiting if needed)."""
        return stmt

    @contextmanager
    def migration_lock(self, conn: Connection) -> Iterator[None]:
        """Hold a cluster-wide lock while migrations run (several nodes may start at once)."""
        yield

    def connection_limit_setting(self, exc: BaseException) -> str:
        """The server setting to raise when ``exc`` (classified ``CONNECTION_LIMIT``) refused a
        connection, as an error message names it."""
        return "the server's connection limit"

    def classify(self, exc: BaseException) -> ErrorKind:
        """Map a DBAPI / SQLAlchemy error to an :class:`ErrorKind`."""
        return ErrorKind.OTHER
