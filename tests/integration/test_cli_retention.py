"""``ratchet dlq``, ``ratchet prune`` and ``ratchet tombstones`` on a SQLite file: tables, JSON,
paging, the guards against acting on everything by accident, and one-line user mistakes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import retention_jobs
from click.testing import CliRunner, Result

from ratchet import JobStatus, Ratchet
from ratchet.cli import main
from ratchet.testing import FakeClock

T0 = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path, support_path: Any) -> Iterator[tuple[str, Ratchet, list[Any]]]:
    """A database with two jobs that succeeded 200 days ago and three dead letters from a week ago."""
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    clock = FakeClock(T0 - timedelta(days=200))
    app = Ratchet(url, allowed_modules=["retention_jobs"], clock=clock)
    app.enqueue(retention_jobs.chatty, 2).with_idempotency_key("old-key").submit()
    app.enqueue(retention_jobs.chatty, 1).submit()
    app.worker().run_due()
    clock.set(datetime.now(UTC) - timedelta(days=7))
    dead = [
        app.enqueue(retention_jobs.fails_after_logging).with_tags("nightly").submit()
        for _ in range(3)
    ]
    app.worker().run_due()
    yield url, app, dead
    app.close()


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_dlq_list_prints_a_table_and_pages_with_a_cursor(db: Any) -> None:
    url, _, dead = db
    table = run("dlq", "list", "--url", url)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split()[:4] == ["JOB", "ID", "FAILED", "AT"]
    assert len(lines) == 4 and "KeyError: 'missing-row'" in table.output
    page = run("dlq", "list", "--url", url, "--limit", "2", "--json")
    doc = json.loads(page.output)
    assert len(doc["jobs"]) == 2 and doc["next"]
    rest = json.loads(run("dlq", "list", "--url", url, "--json", "--cursor", doc["next"]).output)
    ids = {j["id"] for j in doc["jobs"]} | {j["id"] for j in rest["jobs"]}
    assert ids == {str(h.id) for h in dead} and rest["next"] is None
    none = run("dlq", "list", "--url", url, "--target", "retention_jobs:noop")
    assert none.output.strip() == "no dead letters match"
    older = run("dlq", "list", "--url", url, "--older-than-days", "30", "--json")
    assert json.loads(older.output)["jobs"] == []


def test_dlq_show_prints_attempts_and_the_log(db: Any) -> None:
    url, _, dead = db
    shown = run("dlq", "show", "--url", url, str(dead[0].id))
    assert shown.exit_code == 0
    assert "attempt 1" in shown.output and "INFO  starting attempt 1" in shown.output
    doc = json.loads(run("dlq", "show", "--url", url, str(dead[0].id), "--json").output)
    assert doc["status"] == "FAILED" and doc["attempt_history"][0]["outcome"]
    assert [line["level"] for line in doc["logs"]] == ["INFO", "ERROR"]
    assert run("jobs", "show", "--url", url, str(dead[0].id)).exit_code == 0
    jobs_doc = json.loads(run("jobs", "show", "--json", "--url", url, str(dead[0].id)).output)
    assert jobs_doc["logs"] == doc["logs"], "jobs show prints the log too"


def test_dlq_replay_needs_a_target_and_replays_by_filter(db: Any) -> None:
    url, app, dead = db
    refused = CliRunner().invoke(main, ["dlq", "replay", "--url", url])
    assert refused.exit_code == 2 and "or --all" in refused.output
    both = CliRunner().invoke(main, ["dlq", "replay", "--url", url, str(dead[0].id), "--all"])
    assert both.exit_code == 2
    one = run("dlq", "replay", "--url", url, str(dead[0].id))
    assert one.output.strip() == "replayed 1 dead letter(s)"
    again = CliRunner().invoke(main, ["dlq", "replay", "--url", url, str(dead[0].id)])
    assert again.exit_code == 1 and "not in the dead-letter queue" in again.output
    tagged = run("dlq", "replay", "--url", url, "--tag", "nightly", "--limit", "1", "--json")
    assert json.loads(tagged.output) == {"replayed": 1}
    too_many = CliRunner().invoke(main, ["dlq", "replay", "--url", url, "--all", "--limit", "5000"])
    assert too_many.exit_code == 2
    assert [app.get_job(h.id).status for h in dead].count(JobStatus.PENDING) == 2


def test_dlq_purge_dry_run_then_for_real(db: Any) -> None:
    url, app, dead = db
    assert CliRunner().invoke(main, ["dlq", "purge", "--url", url]).exit_code == 2
    dry = run("dlq", "purge", "--url", url, "--all", "--dry-run")
    assert dry.output.strip() == "would purge 3 dead letter(s)"
    assert run("dlq", "purge", "--url", url, "--older-than-days", "30").output.strip() == (
        "purged 0 dead letter(s)"
    )
    done = json.loads(run("dlq", "purge", "--url", url, "--older-than-days", "6", "--json").output)
    assert done == {"purged": 3, "dry_run": False}
    assert all(app.get_job(h.id) is None for h in dead)


def test_prune_reports_what_it_removed(db: Any) -> None:
    url, app, _ = db
    dry = json.loads(run("prune", "--url", url, "--dry-run", "--json").output)
    assert dry["removed"] == {"SUCCEEDED": 2, "CANCELED": 0} and dry["dry_run"]
    done = run("prune", "--url", url)
    assert "removed 2 SUCCEEDED job(s)" in done.output
    assert "job log line(s) (older than 30 days)" in done.output
    assert app.store.count_by_status().get("SUCCEEDED", 0) == 0


def test_tombstones_purge_frees_old_keys(db: Any) -> None:
    url, app, _ = db
    run("prune", "--url", url)
    missing = CliRunner().invoke(main, ["tombstones", "purge", "--url", url])
    assert missing.exit_code == 2 and "--older-than-days" in missing.output
    dry = run("tombstones", "purge", "--url", url, "--older-than-days", "100", "--dry-run")
    # "old-key" only: the other old job was keyed by its own id, which went with it.
    assert dry.output.strip() == "would purge 1 idempotency key(s) older than 100 days"
    done = run("tombstones", "purge", "--url", url, "--older-than-days", "100", "--json")
    assert json.loads(done.output) == {"purged": 1, "dry_run": False}
    assert app.store.find_by_idempotency_key("old-key") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["dlq", "list", "--cursor", "nonsense"], "not a page cursor"),
        (["dlq", "list", "--failed-before", "yesterday"], "not an ISO-8601 instant"),
        (["dlq", "show", "not-a-uuid"], "not a job id"),
        (
            ["dlq", "list", "--failed-after", "2026-02-01", "--failed-before", "2026-01-01"],
            "earlier",
        ),
    ],
)
def test_user_mistakes_print_one_line(db: Any, args: list[str], message: str) -> None:
    url, _, _ = db
    result = CliRunner().invoke(main, [*args[:2], "--url", url, *args[2:]])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_url_without_the_schema_is_reported(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["prune", "--url", f"sqlite:///{tmp_path / 'none.db'}"])
    assert result.exit_code == 2 and "no SQLite database" in result.output
