"""Retention over 20,000 ended jobs while a worker runs jobs on the same database: a correctness
test of the batched removal (what goes, what stays, nothing left behind, no job of the worker
disturbed), not a timing. The timed version is ``benchmarks/bench_prune.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import retention_jobs
from sqlalchemy import func, select

from ratchet import JobStatus, Ratchet, RetentionSettings
from ratchet.sql import schema
from ratchet.testing.jobs import running_worker
from ratchet.testing.retention_contract import seed_ended_jobs

OLD = 20_000


def count(app: Ratchet, table: Any, *where: Any) -> int:
    with app.store.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


def test_pruning_twenty_thousand_jobs_while_a_worker_runs(
    sqlite_or_postgres_url: str, support_path: Any
) -> None:
    url = sqlite_or_postgres_url
    settings = RetentionSettings(batch_size=500, pause_between_batches=timedelta(0))
    app = Ratchet(url, allowed_modules=["retention_jobs"], auto_migrate=True, retention=settings)
    now = datetime.now(UTC)
    old = seed_ended_jobs(app.store, OLD, ended_at=now - timedelta(days=100), log_lines=1)
    young = seed_ended_jobs(app.store, 300, ended_at=now - timedelta(days=10), log_lines=1)
    old_failed = seed_ended_jobs(
        app.store, 200, ended_at=now - timedelta(days=100), status=JobStatus.FAILED
    )
    try:
        with running_worker(app, concurrency=4) as worker:
            handles = [app.enqueue(retention_jobs.chatty, 2).submit() for _ in range(200)]
            report = app.retention.run()
            assert worker.wait_until(
                lambda: all(app.get_job(h.id).status is JobStatus.SUCCEEDED for h in handles), 120
            )
        assert report.complete and report.removed["SUCCEEDED"] == OLD
        assert report.batches >= OLD // settings.max_batch_size
        J = schema.job
        assert count(app, J, J.c.job_id.in_(old[:500])) == 0
        END = schema.job_end
        assert count(app, J) == 300 + 200 + 200
        assert count(app, END, END.c.terminal_status == "SUCCEEDED") == 300 + 200
        assert count(app, END, END.c.terminal_status == "FAILED") == 200, "the DLQ is not pruned"
        assert count(app, schema.job_execution) == 300 + 200 + 200  # young, worker's, DLQ
        assert count(app, schema.job_tag) == 300 + 200  # young, DLQ
        assert count(app, schema.job_log) == 300 + 200 * 3, "old lines went with their jobs"
        # The seeded jobs were given keys: those stay. The worker's jobs, keyed by their own
        # ids, wrote none.
        assert count(app, schema.idempotency_key) == OLD + 300 + 200, "tombstones stay"
        assert all(app.get_job(j) is not None for j in young[:20] + old_failed[:20])
    finally:
        app.close()
