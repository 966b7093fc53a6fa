"""Key rows written for jobs keyed by their own ids, as submissions did before a job's own id
held its key, are removed by ``ratchet tombstones purge --own-ids`` whatever their age; keys
given to jobs stay, and a builder submitted again still answers with its job."""

from __future__ import annotations

import json
from typing import Any

import retention_jobs
from click.testing import CliRunner
from sqlalchemy import func, insert, select

from ratchet import Ratchet
from ratchet.cli import main
from ratchet.sql import schema

IDEM = schema.idempotency_key


def key_rows(app: Ratchet) -> set[str]:
    with app.store.engine.connect() as conn:  # type: ignore[attr-defined]
        return set(conn.execute(select(IDEM.c.idempotency_key)).scalars())


def purge(url: str, *flags: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["tombstones", "purge", "--url", url, "--json", *flags])
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.output)
    return found


def test_rows_of_own_id_keys_go_and_given_keys_stay(
    sqlite_or_postgres_url: str, support_path: Any
) -> None:
    url = sqlite_or_postgres_url
    app = Ratchet(url, allowed_modules=["retention_jobs"], auto_migrate=True)
    try:
        builders = [app.enqueue(retention_jobs.chatty, i) for i in range(7)]
        handles = app.submit_many(builders)
        given = [
            app.enqueue(retention_jobs.chatty, 9).with_idempotency_key(f"order-{i}").submit()
            for i in range(3)
        ]
        assert key_rows(app) == {"order-0", "order-1", "order-2"}
        # The rows an earlier version wrote for the default keys.
        old_rows = [
            {"idempotency_key": str(h.id), "job_id": h.id, "created_at": app.now()} for h in handles
        ]
        with app.store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(insert(IDEM), old_rows)
        assert len(key_rows(app)) == 10

        assert purge(url, "--own-ids", "--dry-run") == {"purged": 7, "dry_run": True}
        assert len(key_rows(app)) == 10, "a dry run deletes nothing"
        assert purge(url, "--own-ids") == {"purged": 7, "dry_run": False}
        assert key_rows(app) == {"order-0", "order-1", "order-2"}
        assert purge(url, "--own-ids") == {"purged": 0, "dry_run": False}

        again = app.submit_many(builders)
        assert [(h.id, h.inserted) for h in again] == [(h.id, False) for h in handles]
        for handle in given:
            assert app.store.find_by_idempotency_key(f"order-{given.index(handle)}") == handle.id
        with app.store.engine.connect() as conn:  # type: ignore[attr-defined]
            jobs = conn.execute(select(func.count()).select_from(schema.job)).scalar_one()
        assert jobs == 10
    finally:
        app.close()


def test_the_purge_takes_one_of_its_two_ways(sqlite_url: str) -> None:
    for flags in ([], ["--own-ids", "--older-than-days", "30"]):
        result = CliRunner().invoke(main, ["tombstones", "purge", "--url", sqlite_url, *flags])
        assert result.exit_code == 2, result.output
        assert "either --older-than-days N or --own-ids" in result.output
