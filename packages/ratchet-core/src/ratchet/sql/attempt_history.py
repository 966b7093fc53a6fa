"""The attempt history: one row per attempt, written once, when the attempt ends.

A running attempt needs no row of its own: its job's live row already says who runs it and
since when (``picked_by``, ``picked_at``, ``epoch``, and ``attempts + 1`` as its number). So a
claim writes nothing here, and the outcome write inserts the finished attempt's row with the
start time read from the live row it fences on. Paths that end an attempt without an outcome
(a takeover abandons it, a cancellation ends its job) insert the row the same way, from the
live row, before they change it.

Rows of attempts still running under a version that opened them at the claim (outcome
``RUNNING``) may exist after an upgrade. The rare paths above replace such a row; the history
read shows it instead of the live row's attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, insert, select

from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import AttemptRecord
from ratchet.sql import schema

Q = schema.job_queue
EXE = schema.job_execution

#: The live statuses whose row describes an attempt in progress.
IN_PROGRESS = (JobStatus.RUNNING.value, JobStatus.TIMED_OUT.value)

#: What :func:`end_attempts` reads of each live row.
LIVE_ATTEMPT_COLUMNS = (Q.c.job_id, Q.c.attempts, Q.c.epoch, Q.c.picked_by, Q.c.picked_at)


def in_progress(row: Any) -> bool:
    """Whether the live ``row`` (status, picked_by, picked_at) describes an attempt that runs."""
    return row.status in IN_PROGRESS and row.picked_by is not None and row.picked_at is not None


def end_attempts(
    conn: Connection, live: Sequence[Any], outcome: str, finished_at: datetime
) -> None:
    """Write the ended attempts of the live rows ``live`` (each with the columns of
    :data:`LIVE_ATTEMPT_COLUMNS`, read before the rows change), ending with ``outcome`` at
    ``finished_at``. A row an earlier version opened for the same attempt is replaced."""
    rows = [r for r in live if r.picked_by is not None and r.picked_at is not None]
    if not rows:
        return
    drop_open_attempts(conn, rows)
    conn.execute(
        insert(EXE),
        [
            {
                "job_id": r.job_id,
                "attempt_no": r.attempts + 1,
                "epoch": r.epoch,
                "node_id": r.picked_by,
                "started_at": r.picked_at,
                "finished_at": finished_at,
                "outcome": outcome,
                "error": None,
                "traceback": None,
            }
            for r in rows
        ],
    )


def drop_open_attempts(conn: Connection, live: Sequence[Any]) -> None:
    """Remove the rows an earlier version opened for the attempts the live rows ``live`` (job
    id, attempts, epoch) still run, so that they can be inserted ended."""
    if live:
        conn.execute(
            delete(EXE).where(
                EXE.c.job_id == bindparam("b_id"),
                EXE.c.attempt_no == bindparam("b_no"),
                EXE.c.epoch == bindparam("b_epoch"),
                EXE.c.outcome == JobStatus.RUNNING.value,
            ),
            [{"b_id": r.job_id, "b_no": r.attempts + 1, "b_epoch": r.epoch} for r in live],
        )


def history(conn: Connection, job_id: uuid.UUID) -> list[AttemptRecord]:
    """Every attempt of ``job_id``, ended or running, in the order they started."""
    records = [
        AttemptRecord(
            job_id=r.job_id,
            attempt=r.attempt_no,
            epoch=r.epoch,
            node_id=r.node_id,
            started_at=r.started_at,
            finished_at=r.finished_at,
            outcome=r.outcome,
            error=r.error,
            traceback=r.traceback,
        )
        for r in conn.execute(
            select(EXE).where(EXE.c.job_id == job_id).order_by(EXE.c.started_at, EXE.c.epoch)
        )
    ]
    live = conn.execute(
        select(Q.c.status, *LIVE_ATTEMPT_COLUMNS).where(
            and_(Q.c.job_id == job_id, Q.c.status.in_(IN_PROGRESS))
        )
    ).first()
    if live is not None and in_progress(live):
        number, epoch = live.attempts + 1, live.epoch
        if not any(a.attempt == number and a.epoch == epoch for a in records):
            records.append(
                AttemptRecord(
                    job_id=job_id,
                    attempt=number,
                    epoch=epoch,
                    node_id=live.picked_by,
                    started_at=live.picked_at,
                    finished_at=None,
                    outcome=JobStatus.RUNNING.value,
                    error=None,
                )
            )
    return records
