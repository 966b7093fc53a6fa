"""Turning claimed rows into :class:`~ratchet.domain.model.ClaimedJob` (one place for every
path that grants ownership: claim, reservation, takeover, and the dialects' own claims)."""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import cache, lru_cache
from typing import Any

from sqlalchemy import ColumnElement, FromClause, bindparam, select

from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.model import ClaimedJob
from ratchet.domain.options import BackoffPolicy
from ratchet.sql import schema

J = schema.job


def has_flow_effects(job: FromClause) -> ColumnElement[bool]:
    """True for a job (row of ``job``, the job table or an alias of it) whose end triggers
    something else: a callback, dependents, or a batch or workflow role."""
    c = job.c
    return (
        c.job_type.is_not(None)
        | c.on_success.is_not(None)
        | c.on_failure.is_not(None)
        | c.has_dependents.is_not(None)
    )


def definitions_of(ids: Any) -> Any:
    """What running a job needs from its cold row, for the job ids ``ids`` (a list of values or
    bound parameters, or one expanding parameter)."""
    return select(
        J.c.job_id,
        J.c.target,
        J.c.payload,
        J.c.max_retries,
        J.c.backoff_policy,
        J.c.backoff_ms,
        J.c.timeout_ms,
        J.c.params,
        J.c.tags,
        J.c.executor,
        J.c.resource_name,
        J.c.caller_principal,
        J.c.trace_context,
        has_flow_effects(J).label("flow_effects"),
    ).where(J.c.job_id.in_(ids))


#: :func:`definitions_of` the ``:ids`` given (built once).
DEFINITIONS = definitions_of(bindparam("ids", expanding=True))


_PRIORITY = {p.value: p for p in JobPriority}
_BACKOFF = {b.value: b for b in BackoffPolicy}


@lru_cache(maxsize=256)
def _millis(ms: int) -> timedelta:
    return timedelta(milliseconds=ms)


@cache
def _plain_row(fields: tuple[str, ...]) -> Any:
    return namedtuple("ClaimRow", fields)


def row_maker(fields: tuple[str, ...]) -> Callable[[Iterable[Any]], Any]:
    """What turns a driver's row (a tuple of ``fields``' values) into a named tuple, as
    :func:`plain_rows` gives them (one class per column list)."""
    maker: Callable[[Iterable[Any]], Any] = _plain_row(fields)._make
    return maker


def plain_rows(rows: Iterable[Any]) -> list[Any]:
    """SQLAlchemy rows as named tuples of the same columns. A row's value read by name costs a
    failed attribute look-up on its class first (an ``AttributeError`` built and dropped, about
    3,000 instructions); a named tuple's is a C-level index. A claimed job reads twenty."""
    rows = list(rows)
    if not rows:
        return rows
    make = row_maker(tuple(rows[0]._fields))
    return list(map(make, rows))


def claimed_job(
    live: Any,
    definition: Any,
    now: datetime,
    *,
    epoch: int,
    takeovers: int = 0,
    scheduled_time: datetime | None = None,
) -> ClaimedJob:
    """The job of a live row (``job_id``, ``attempts``, ``priority``, ``scheduled_time``) and
    its definition (a row of :data:`DEFINITIONS`; the same row where one query returns both),
    owned under ``epoch`` since ``now``."""
    d = definition
    return ClaimedJob(
        job_id=live.job_id,
        epoch=epoch,
        attempt=live.attempts + 1,
        target=d.target,
        payload=d.payload,
        priority=_PRIORITY[live.priority],
        max_retries=d.max_retries,
        backoff=_BACKOFF[d.backoff_policy],
        backoff_delay=_millis(d.backoff_ms),
        timeout=None if d.timeout_ms is None else _millis(d.timeout_ms),
        scheduled_time=live.scheduled_time if scheduled_time is None else scheduled_time,
        claimed_at=now,
        params=json.loads(d.params) if d.params and d.params != "{}" else {},
        tags=tuple(json.loads(d.tags)) if d.tags and d.tags != "[]" else (),
        executor=d.executor,
        resource_name=d.resource_name,
        takeovers=takeovers,
        flow_effects=bool(d.flow_effects),
        caller_principal=d.caller_principal,
        trace_context=d.trace_context,
    )
