"""Migration 0016 moves the end of every ended job out of its job row into
``scheduler_job_end``, and its downgrade moves it back; on every backend."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from alembic import command

from ratchet.domain.lifecycle import JobStatus
from ratchet.sql.migrate import alembic_config, current_revisions
from ratchet.sql.types import UTCMicros, UUIDType
from ratchet.testing import FakeClock
from ratchet.testing.store_contract import new_job

#: The job table's end columns before revision 0016.
OLD_JOB = sa.table(
    "scheduler_job",
    sa.column("job_id", UUIDType()),
    sa.column("terminal_status", sa.String()),
    sa.column("terminal_error", sa.Text()),
    sa.column("result", sa.Text()),
    sa.column("terminated_at", UTCMicros()),
    sa.column("attempts", sa.Integer()),
)
QUEUE = sa.table("scheduler_job_queue", sa.column("job_id", UUIDType()))


def downgrade_job_end(store: Any) -> None:
    cfg = alembic_config(store)
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "job_end@-1")


def job_columns(store: Any) -> set[str]:
    with store.engine.connect() as conn:
        return {c["name"] for c in sa.inspect(conn).get_columns("scheduler_job")}


def test_ended_jobs_move_to_the_end_table_and_back(store: Any) -> None:
    clock = FakeClock()
    canceled, by_old_node, live = (new_job(clock, target=f"tests.jobs:job{i}") for i in range(3))
    store.insert_jobs([canceled, by_old_node, live], now=clock.now())
    assert store.cancel_job(canceled.job_id, now=clock.now()).value

    downgrade_job_end(store)
    assert "0016" not in current_revisions(store)
    assert {"terminal_status", "terminated_at", "attempts", "result"} <= job_columns(store)
    ended_at = clock.now() + timedelta(seconds=5)
    with store.engine.begin() as conn:
        rows = {
            r.job_id: r
            for r in conn.execute(sa.select(OLD_JOB).where(OLD_JOB.c.terminal_status.is_not(None)))
        }
        assert set(rows) == {canceled.job_id}, "the downgrade moved the end back to the job row"
        assert (rows[canceled.job_id].terminal_status, rows[canceled.job_id].attempts) == (
            JobStatus.CANCELED.value,
            0,
        )
        assert rows[canceled.job_id].terminated_at == clock.now()
        # A job ended the way an older version ends one: on its row, its live row deleted.
        conn.execute(sa.delete(QUEUE).where(QUEUE.c.job_id == by_old_node.job_id))
        conn.execute(
            sa.update(OLD_JOB)
            .where(OLD_JOB.c.job_id == by_old_node.job_id)
            .values(
                terminal_status=JobStatus.SUCCEEDED.value,
                result="42",
                terminated_at=ended_at,
                attempts=2,
            )
        )

    store.migrate()
    assert "0016" in current_revisions(store)
    assert not {"terminal_status", "terminal_error", "terminated_at", "attempts", "result"} & (
        job_columns(store)
    )
    old = store.get_job(by_old_node.job_id)
    assert (old.status, old.result, old.attempts, old.terminated_at) == (
        JobStatus.SUCCEEDED,
        "42",
        2,
        ended_at,
    )
    assert store.get_job(canceled.job_id).status is JobStatus.CANCELED
    assert store.get_job(live.job_id).status is JobStatus.PENDING
    counts = store.count_by_status()
    assert (counts["SUCCEEDED"], counts["CANCELED"], counts["PENDING"]) == (1, 1, 1)
