"""The operator commands against real stores (SQLite; PostgreSQL where marked): every command
prints a table or lines, JSON with --json, and one line for a user's mistake."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ratchet import JobPriority, JobStatus, Ratchet
from ratchet.cli import main
from ratchet.domain.watcher import NodeInfo
from ratchet.ports import WatcherStore

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres15", marks=pytest.mark.postgres),
]


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def one_line_error(result: Result, code: int = 2) -> str:
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, lines
    return lines[0]


@dataclass
class Fleet:
    url: str
    done: list[uuid.UUID]
    failed: uuid.UUID
    pending: list[uuid.UUID]
    running: uuid.UUID
    master: uuid.UUID


@pytest.fixture(params=BACKENDS)
def fleet(request: pytest.FixtureRequest, tmp_path: Path, support_path: object) -> Iterator[Fleet]:
    """A store with finished, dead-lettered, pending and running jobs, a live node running one
    of them, and a recurring master (the real clock: heartbeats are judged against it)."""
    import ops_jobs

    url = (
        f"sqlite:///{tmp_path / 'ops.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_store_url")
    )
    app = Ratchet(url, allowed_modules=["ops_jobs"], auto_migrate=True)
    done = [app.enqueue(ops_jobs.ok, i).submit().id for i in range(3)]
    failed = app.enqueue(ops_jobs.leaks).with_max_retries(0).submit().id
    app.worker(concurrency=4).run_due()
    pending = [app.enqueue(ops_jobs.ok, 10 + i).with_tags("eu").submit().id for i in range(5)]
    running = app.enqueue(ops_jobs.ok, 99).with_priority(JobPriority.CRITICAL).submit().id
    watcher = app.store.capability(WatcherStore)
    now = datetime.now(UTC)
    watcher.register_incarnation(NodeInfo("web-1-a", "web-1", "host-1", 4242, 8), now=now)
    claimed = app.store.claim("web-1-a", 1, now=now, boost_interval=timedelta(minutes=15))
    assert [c.job_id for c in claimed] == [running]
    master = app.schedule_recurring("0 0 3 * * ?", "Europe/Paris", ops_jobs.ok, 1)
    master_id = master.with_business_key("nightly-ok").submit().id
    app.close()
    yield Fleet(url, done, failed, pending, running, master_id)


# ------------------------------------------------------------------------- jobs
def test_jobs_list_pages_with_the_cursor_it_prints(fleet: Fleet) -> None:
    first = run("jobs", "list", "--url", fleet.url, "--status", "pending", "--limit", "3")
    assert first.exit_code == 0, first.output
    *rows, more = first.stdout.splitlines()[1:]
    assert more.startswith("more: --cursor ")
    cursor = more.split()[-1]
    second = run(
        "jobs",
        "list",
        "--url",
        fleet.url,
        "--status",
        "pending",
        "--limit",
        "3",
        "--cursor",
        cursor,
        "--json",
    )
    doc = json.loads(second.stdout)
    shown = [r.split()[0] for r in rows] + [j["id"] for j in doc["jobs"]]
    assert shown == [str(i) for i in reversed(fleet.pending)] and doc["next_cursor"] is None


def test_jobs_list_filters(fleet: Fleet) -> None:
    def listed(*args: str) -> list[str]:
        result = run("jobs", "list", "--url", fleet.url, "--json", *args)
        assert result.exit_code == 0, result.output
        return [j["id"] for j in json.loads(result.stdout)["jobs"]]

    assert listed("--status", "failed") == [str(fleet.failed)]
    assert set(listed("--status", "succeeded", "--status", "running")) == {
        *map(str, fleet.done),
        str(fleet.running),
    }
    assert len(listed("--tag", "eu")) == 5
    assert listed("--target", "ops_jobs:leaks") == [str(fleet.failed)]
    assert len(listed("--finished-after", "2000-01-01T00:00:00")) == 4
    assert listed("--created-before", "2000-01-01T00:00:00+00:00") == []


def test_jobs_list_mistakes_are_one_line(fleet: Fleet) -> None:
    assert "cursor" in one_line_error(run("jobs", "list", "--url", fleet.url, "--cursor", "bogus"))
    other = run("jobs", "list", "--url", fleet.url, "--limit", "1").stdout.splitlines()[-1]
    mismatch = run("jobs", "list", "--url", fleet.url, "--tag", "eu", "--cursor", other.split()[-1])
    assert "other filters" in one_line_error(mismatch)
    assert "ISO-8601" in one_line_error(
        run("jobs", "list", "--url", fleet.url, "--created-after", "yesterday")
    )
    assert "UUID" in one_line_error(run("jobs", "list", "--url", fleet.url, "--batch", "b-1"))
    assert "status" in one_line_error(run("jobs", "list", "--url", fleet.url, "--status", "done"))


def test_jobs_show_prints_attempts_with_the_sanitised_traceback(fleet: Fleet) -> None:
    result = run("jobs", "show", "--url", fleet.url, str(fleet.failed))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "status            FAILED" in text
    assert "ATTEMPT" in text and "ConnectionError" in text
    assert "Traceback (most recent call last):" in text and "in leaks" in text
    assert "hunter2" not in text and "postgresql://***@db.internal" in text
    doc = json.loads(run("jobs", "show", "--json", "--url", fleet.url, str(fleet.failed)).stdout)
    [attempt] = doc["attempt_history"]
    assert attempt["error"].startswith("ConnectionError: ") and "leaks" in attempt["traceback"]
    unknown = run("jobs", "show", "--url", fleet.url, str(uuid.uuid4()))
    assert "no job" in one_line_error(unknown, code=1)


def test_jobs_pause_resume_cancel_retry(fleet: Fleet) -> None:
    job = str(fleet.pending[0])
    assert run("jobs", "pause", "--url", fleet.url, job).stdout == f"paused {job}\n"
    listed = json.loads(
        run("jobs", "list", "--url", fleet.url, "--status", "paused", "--json").stdout
    )
    assert [j["id"] for j in listed["jobs"]] == [job]
    resumed = json.loads(run("jobs", "resume", "--json", "--url", fleet.url, job).stdout)
    assert resumed == {"id": job, "action": "resumed"}
    assert "not paused" in one_line_error(run("jobs", "resume", "--url", fleet.url, job), code=1)
    assert run("jobs", "cancel", "--url", fleet.url, job).exit_code == 0
    assert "cannot be paused" in one_line_error(run("jobs", "pause", "--url", fleet.url, job), 1)
    retried = run("jobs", "retry", "--json", "--url", fleet.url, str(fleet.failed))
    assert json.loads(retried.stdout)["action"] == "retrying"
    assert "not a job id" in one_line_error(run("jobs", "pause", "--url", fleet.url, "x"))


# ------------------------------------------------------------------------- recurring
def test_recurring_commands(fleet: Fleet) -> None:
    listed = run("recurring", "list", "--url", fleet.url)
    assert listed.exit_code == 0, listed.output
    header, row = listed.stdout.splitlines()
    assert header.split()[:3] == ["ID", "KEY", "CRON"] and "nightly-ok" in row and "ACTIVE" in row
    shown = json.loads(run("recurring", "show", "--json", "--url", fleet.url, "nightly-ok").stdout)
    assert shown["id"] == str(fleet.master) and shown["zone"] == "Europe/Paris"
    nxt = json.loads(
        run(
            "recurring", "next", "--json", "--count", "3", "--url", fleet.url, str(fleet.master)
        ).stdout
    )
    times = [datetime.fromisoformat(t) for t in nxt["next"]]
    assert (
        times[0].isoformat()
        == datetime.fromisoformat(shown["next_fire"]).astimezone(times[0].tzinfo).isoformat()
    )
    assert ([t.hour for t in times] == [3, 3, 3] and times[1] - times[0] == timedelta(days=1)) or (
        times[1] - times[0] in (timedelta(hours=23), timedelta(hours=25))  # a DST change
    )
    assert run("recurring", "pause", "--url", fleet.url, "nightly-ok").exit_code == 0
    assert "PAUSED" in run("recurring", "list", "--url", fleet.url).stdout
    assert (
        "is not paused" not in run("recurring", "resume", "--url", fleet.url, "nightly-ok").output
    )
    assert run("recurring", "cancel", "--url", fleet.url, str(fleet.master)).exit_code == 0
    assert run("recurring", "list", "--url", fleet.url).stdout == "no recurring masters\n"
    ended = run("recurring", "next", "--url", fleet.url, str(fleet.master))
    assert "will not fire again (CANCELED)" in ended.stdout
    assert "no recurring master" in one_line_error(
        run("recurring", "show", "--url", fleet.url, "nope"), code=1
    )


# ------------------------------------------------------------------------- nodes, stats, db
def test_nodes_shows_heartbeats_and_what_each_runs(fleet: Fleet) -> None:
    result = run("nodes", "--url", fleet.url)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split()[:3] == ["NODE", "STATE", "HOST"]
    assert row.split()[:4] == ["web-1-a", "ALIVE", "host-1", "4242"] and "ops_jobs:ok" in row
    [doc] = json.loads(run("nodes", "--json", "--url", fleet.url).stdout)
    assert [j["id"] for j in doc["jobs"]] == [str(fleet.running)]
    assert 0 <= doc["heartbeat_age_seconds"] < 60


def test_stats_reports_queue_health(fleet: Fleet) -> None:
    doc = json.loads(run("stats", "--json", "--url", fleet.url).stdout)
    assert (doc["pending"], doc["running"], doc["failed"], doc["due_now"]) == (5, 1, 1, 5)
    assert doc["counts"] == {"SUCCEEDED": 3, "FAILED": 1, "PENDING": 5, "RUNNING": 1}
    assert doc["succeeded_in_window"] == 3 and doc["running_by_node"] == {"web-1-a": 1}
    assert doc["oldest_pending_age_seconds"] >= 0
    text = run("stats", "--url", fleet.url).stdout
    assert text.splitlines()[0].split() == ["pending", "5"] and "failed (DLQ)" in text


def test_db_current(fleet: Fleet) -> None:
    doc = json.loads(run("db", "current", "--json", "--url", fleet.url).stdout)
    assert doc["up_to_date"] and doc["current"] == doc["heads"] and "0014" in doc["current"]
    assert "(up to date)" in run("db", "current", "--url", fleet.url).stdout


def test_health_is_a_probe(fleet: Fleet) -> None:
    ready = run("health", "--url", fleet.url)
    assert ready.exit_code == 0, ready.output
    assert ready.stdout.splitlines() == ["ok   database: reachable", "ok   schema: current"]
    live = json.loads(run("health", "--json", "--url", fleet.url, "--node", "web-1").stdout)
    assert live["healthy"] and live["checks"][-1]["detail"].startswith("web-1-a ALIVE")
    gone = run("health", "--url", fleet.url, "--node", "web-2")
    assert gone.exit_code == 1 and "no live node 'web-2'" in gone.stdout
    stale = run("health", "--url", fleet.url, "--node", "web-1", "--max-silence", "0.1")
    assert stale.exit_code == 1 or "FAIL" not in stale.stdout  # a heartbeat this fresh is rare


def test_health_fails_without_a_database(tmp_path: Path) -> None:
    missing = run("health", "--url", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.exit_code == 1 and missing.stdout.startswith("FAIL database: ")
    empty = tmp_path / "empty.db"
    empty.touch()
    no_schema = run("health", "--json", "--url", f"sqlite:///{empty}")
    doc = json.loads(no_schema.stdout)
    assert no_schema.exit_code == 1 and doc["checks"][-1]["check"] == "schema"
    refused = run("health", "--url", "postgresql+psycopg://u:secret@127.0.0.1:9/db")
    assert refused.exit_code == 1 and "secret" not in refused.output


def test_health_and_stats_on_an_empty_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert run("db", "upgrade", "--url", url).exit_code == 0
    assert run("health", "--url", url).exit_code == 0
    doc = json.loads(run("stats", "--json", "--url", url).stdout)
    assert doc["pending"] == 0 and doc["oldest_pending_age_seconds"] is None
    assert run("nodes", "--url", url).stdout == "no nodes\n"


# ------------------------------------------------------------------------- config
def test_config_show_hides_secrets_and_names_sources(tmp_path: Path) -> None:
    file = tmp_path / "ratchet.toml"
    file.write_text('concurrency = 4\nheartbeat_interval = "5s"\norphan_grace = 20\n')
    env = {
        "RATCHET_URL": "postgresql+psycopg://app:s3cret@db:5432/jobs",
        "RATCHET_CONFIG_FILE": str(file),
        "RATCHET_CONCURRENCY": "12",
    }
    rows = {r["env"]: r for r in json.loads(run("config", "show", "--json", env=env).stdout)}
    assert rows["RATCHET_URL"]["value"] == "postgresql+psycopg://app:***@db:5432/jobs"
    assert rows["RATCHET_CONCURRENCY"] == {
        "name": "concurrency",
        "scope": "worker",
        "env": "RATCHET_CONCURRENCY",
        "value": 12,
        "source": "env RATCHET_CONCURRENCY",
    }
    assert rows["RATCHET_HEARTBEAT_INTERVAL"]["value"] == 5.0
    assert rows["RATCHET_HEARTBEAT_INTERVAL"]["source"] == f"file {file}"
    assert rows["RATCHET_BATCH_SIZE"]["source"] == "default"
    text = run("config", "show", env=env).stdout
    assert "s3cret" not in text and "RATCHET_CONCURRENCY" in text
    bad = run("config", "show", env={**env, "RATCHET_CONCURRENCY": "many"})
    assert "RATCHET_CONCURRENCY" in one_line_error(bad)
    missing = run("config", "show", "--config-file", str(tmp_path / "nope.toml"))
    assert "cannot read config file" in one_line_error(missing)


def test_admin_commands_take_the_url_from_the_environment(fleet: Fleet) -> None:
    result = run("stats", "--json", env={"RATCHET_URL": fleet.url})
    assert result.exit_code == 0 and json.loads(result.stdout)["failed"] == 1


def test_usage_mistakes_are_one_line_and_a_bare_group_shows_its_help() -> None:
    assert "range 1<=x<=1000" in one_line_error(run("jobs", "list", "--limit", "0"))
    assert "No such command 'nosuch'" in one_line_error(run("jobs", "nosuch"))
    bare = run("recurring")
    assert "Usage:" in bare.output and "error:" not in bare.output and "next" in bare.output


def test_unreachable_and_bad_urls_are_one_line() -> None:
    assert "provides a store" in one_line_error(run("stats", "--url", "nosuchdb://x/y"))
    refused = run("nodes", "--url", "postgresql+psycopg://u:secret@127.0.0.1:9/db")
    assert "secret" not in one_line_error(refused)


def test_jobs_counts_by_status(fleet: Fleet) -> None:
    app = Ratchet(fleet.url, allow_empty_class_policy=True, auto_migrate=False)
    try:
        assert app.jobs.count_by_status()[JobStatus.PENDING.value] == 5
    finally:
        app.close()
