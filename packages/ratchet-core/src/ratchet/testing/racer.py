"""A child process that inserts one job when told to: concurrent submitters for the contracts.

``python -m ratchet.testing.racer URL KEYS_JSON [PATH]`` connects, prints ``ready``, waits for a
line on stdin (the start signal, sent to every racer at once), inserts one job with the given
keys as the scheduler does (a lost idempotency-key race is retried once in a fresh transaction),
and prints one JSON line describing the outcome. ``PATH`` is ``plain`` (the default: one job) or
``chain`` (the job heads a two-step chain, inserted as a flow). It imports no test framework, so
it starts fast.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any


def race(url: str, keys: dict[str, str], path: str = "plain") -> dict[str, Any]:
    """Insert one job (through ``path``) when stdin says so; return what happened."""
    from ratchet.domain.errors import DuplicateBusinessKeyError, DuplicateIdempotencyKeyError
    from ratchet.domain.lifecycle import JobPriority
    from ratchet.domain.model import NewJob
    from ratchet.domain.options import BackoffPolicy
    from ratchet.ids import uuid7
    from ratchet.plugins import Plugins, make_plugin_manager

    now = datetime(2026, 1, 1, tzinfo=UTC)
    fields: dict[str, Any] = {
        "job_id": uuid7(),
        "target": "tests.jobs:noop",
        "payload": '{"args":[],"kwargs":{}}',
        "priority": JobPriority.NORMAL,
        "max_retries": 0,
        "backoff": BackoffPolicy.NONE,
        "backoff_delay": timedelta(0),
        "timeout": None,
        "scheduled_time": now,
        "created_at": now,
        "idempotency_key": str(uuid.uuid4()),
    }
    fields.update(keys)
    job = NewJob(**fields)
    jobs = [job]
    if path == "chain":
        from ratchet.domain.flows import FlowJob
        from ratchet.domain.lifecycle import JobStatus
        from ratchet.domain.workflow import JobType

        step = NewJob(
            **{
                **fields,
                "job_id": uuid7(),
                "idempotency_key": str(uuid.uuid4()),
                "business_key": None,
                "status": JobStatus.WAITING,
            }
        )
        jobs.append(step)
        flow = [
            FlowJob(job, chain_id=job.job_id, has_dependents=True),
            FlowJob(
                step,
                JobType.CHAIN_STEP,
                chain_id=job.job_id,
                depends_on=job.job_id,
                waiting_for=job.job_id,
            ),
        ]
    elif path != "plain":
        raise ValueError(f"unknown path {path!r}")
    # Any: ``insert_flow`` belongs to the SQL stores, not to the Store port.
    store: Any = Plugins(make_plugin_manager()).store_factory(url)(url, None)

    def insert() -> Any:
        if path == "chain":
            return store.insert_flow(flow, now=now)
        return store.insert_jobs([job], now=now)[0]

    try:
        store.database_time()  # connected before the start signal
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            try:
                result = insert()
            except DuplicateIdempotencyKeyError:
                result = insert()
        except DuplicateBusinessKeyError as exc:
            holder = None if exc.holder is None else str(exc.holder)
            return {"outcome": "duplicate-business-key", "holder": holder}
        return {
            "outcome": "inserted" if result.inserted else "returned",
            "job_id": str(result.job_id),
            "inserted": result.inserted,
            "job_ids": [str(j.job_id) for j in jobs] if result.inserted else [],
        }
    finally:
        store.close()


def main() -> None:
    try:
        report = race(sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:4])
    except BaseException as exc:  # reported to the parent, which fails the test
        report = {"outcome": "error", "error": repr(exc)}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
