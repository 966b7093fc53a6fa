"""``app.jobs``: the query API over the jobs of one app (docs/querying.md).

Listings are keyset pages (:class:`~ratchet.domain.query.JobPage`) with an opaque cursor, so
the millionth job is as cheap to reach page by page as the first; everything returned is a
frozen value of :mod:`ratchet.domain`.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ratchet.domain.authorization import JobAction
from ratchet.domain.errors import ConfigurationError, JobNotFound, NotAuthorized
from ratchet.domain.model import JobRecord
from ratchet.domain.query import (
    DEFAULT_PAGE,
    MAX_PAGE,
    InvalidQuery,
    JobHistory,
    JobLink,
    JobPage,
    JobQuery,
    QueueHealth,
    RunningJob,
    check_limit,
    decode_cursor,
    encode_cursor,
)
from ratchet.ports import QueryStore

if TYPE_CHECKING:
    from ratchet.engine.host import AppHost

_QUERY_FIELDS = frozenset(f.name for f in fields(JobQuery))


def make_query(query: JobQuery | None = None, **filters: Any) -> JobQuery:
    """``query``, or one built from keyword filters (the fields of :class:`JobQuery`;
    ``status`` is one status or several).

    :raises InvalidQuery: both given, an unknown filter name, or a bad value.
    """
    if query is not None:
        if filters:
            raise InvalidQuery("give a JobQuery or keyword filters, not both")
        return query
    if "status" in filters:
        status = filters.pop("status")
        if "statuses" in filters:
            raise InvalidQuery("give status or statuses, not both")
        filters["statuses"] = () if status is None else status
    unknown = sorted(set(filters) - _QUERY_FIELDS)
    if unknown:
        raise InvalidQuery(
            f"unknown filter {', '.join(unknown)}; known: status, {', '.join(sorted(_QUERY_FIELDS))}"
        )
    statuses = filters.get("statuses", ())
    if isinstance(statuses, str) or not isinstance(statuses, (tuple, list, set, frozenset)):
        statuses = (statuses,)
    filters["statuses"] = tuple(statuses)
    return JobQuery(**filters)


class Jobs:
    """Reads over an app's jobs: keyset pages, one job's history, counts and queue health."""

    def __init__(self, app: AppHost) -> None:
        self._app = app

    @property
    def _store(self) -> QueryStore:
        store = self._app.store.capability(QueryStore)  # type: ignore[type-abstract]
        if store is None:
            raise ConfigurationError(
                f"the {type(self._app.store).__name__} store cannot answer queries (it has no "
                "QueryStore capability)"
            )
        return store

    def list(
        self,
        query: JobQuery | None = None,
        *,
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE,
        **filters: Any,
    ) -> JobPage:
        """One page of the jobs matching ``query`` (or the keyword filters), newest first.

        Pass the page's ``next_cursor`` back, with the same filters, for the next page; it is
        None on the last page.

        :raises InvalidQuery: a bad filter or ``limit`` (1..1000).
        :raises InvalidCursor: ``cursor`` was not made by this API for these filters.
        """
        wanted = make_query(query, **filters)
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor, wanted)
        rows = self._store.query_jobs(wanted, after=after, limit=limit + 1)
        if len(rows) <= limit:
            return JobPage(tuple(self._visible(rows)), None)
        read = rows[:limit]
        # The cursor follows what was read, so a page the principal sees only part of is short
        # but the next one still continues where it ended.
        return JobPage(tuple(self._visible(read)), encode_cursor(read[-1].job_id, wanted))

    def _visible(self, records: Sequence[JobRecord]) -> builtins.list[JobRecord]:
        """``records`` as readers see them (decrypted where the keys are at hand, sensitive
        fields masked), without those the current principal may not read."""
        app = self._app
        shown: builtins.list[JobRecord] = []
        for record in records:
            if not app.guard.permits_all:
                try:
                    app.guard.job_action(JobAction.READ, record.job_id, record)
                except NotAuthorized:
                    continue
            shown.append(app.protection.reveal(record))
        return shown

    def iterate(
        self, query: JobQuery | None = None, *, page_size: int = MAX_PAGE, **filters: Any
    ) -> Iterator[JobRecord]:
        """Every job matching the filters, newest first, read one page at a time."""
        wanted = make_query(query, **filters)
        cursor: str | None = None
        while True:
            page = self.list(wanted, cursor=cursor, limit=page_size)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get(self, job_id: uuid.UUID) -> JobRecord:
        """The job, as :meth:`ratchet.Ratchet.get_job` shows it.

        :raises JobNotFound: there is no job ``job_id``.
        """
        record = self._app.get_job(job_id)  # authorised, decrypted and masked as readers see it
        if record is None:
            raise JobNotFound(f"no job {job_id}")
        return record

    def history(self, job_id: uuid.UUID) -> JobHistory:
        """The job and its attempts, oldest first, each with its error and traceback.

        :raises JobNotFound: there is no job ``job_id``.
        """
        job = self.get(job_id)
        return JobHistory(job, tuple(self._app.store.attempts(job_id)))

    def count_by_status(self) -> dict[str, int]:
        """How many jobs are in each status (statuses without jobs are left out)."""
        return dict(self._app.store.count_by_status())

    def health(self, *, window: timedelta = timedelta(minutes=5)) -> QueueHealth:
        """The queue now: counts, what is due and how long it has waited, and the jobs that
        ended in the last ``window``.

        :raises InvalidQuery: ``window`` is not positive.
        """
        if window <= timedelta(0):
            raise InvalidQuery(f"window must be positive, got {window}")
        return self._store.queue_health(now=self._app.now(), window=window)

    def dependants(self, job_id: uuid.UUID, *, limit: int = MAX_PAGE) -> builtins.list[JobRecord]:
        """The jobs of a workflow that wait on ``job_id`` (its chain steps and branches, and
        theirs), nearest first.

        :raises JobNotFound: there is no job ``job_id``.
        """
        check_limit(limit)
        self.get(job_id)
        return self._visible(self._store.dependants(job_id, limit=limit))

    def links(
        self, job_id: uuid.UUID, *, depth: int = 1, limit: int = MAX_PAGE
    ) -> builtins.list[JobLink]:
        """The workflow edges around ``job_id``: what it waits for (its parent, with the branch
        condition if it is a branch) and what waits for it, following dependants ``depth``
        levels down (one query per level), at most ``limit`` edges. Only ids and conditions:
        read a linked job with :meth:`get`.

        :raises JobNotFound: there is no job ``job_id``.
        :raises InvalidQuery: ``depth`` is below 1 or ``limit`` out of range.
        """
        check_limit(limit)
        if depth < 1:
            raise InvalidQuery(f"depth must be at least 1, got {depth}")
        self.get(job_id)
        found: builtins.list[JobLink] = []
        seen: set[tuple[uuid.UUID, uuid.UUID]] = set()
        level = [job_id]
        for _ in range(depth):
            if not level or len(found) >= limit:
                break
            fresh = [
                link
                for link in self._store.job_links(level, limit=limit - len(found))
                if (link.parent_id, link.child_id) not in seen
            ]
            seen.update((link.parent_id, link.child_id) for link in fresh)
            found += fresh
            parents = set(level)
            level = [link.child_id for link in fresh if link.parent_id in parents]
        return found

    def batch_children(
        self, batch_id: uuid.UUID, *, cursor: str | None = None, limit: int = DEFAULT_PAGE
    ) -> JobPage:
        """One page of a batch's children, newest first (as :meth:`list`)."""
        return self.list(JobQuery(batch_id=batch_id), cursor=cursor, limit=limit)

    def running(self, *, limit: int = MAX_PAGE) -> builtins.list[RunningJob]:
        """The jobs nodes hold now (RUNNING, or reserved as QUEUED), by node."""
        check_limit(limit)
        return self._store.running_jobs(limit=limit)
