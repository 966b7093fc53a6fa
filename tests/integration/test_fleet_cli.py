"""``ratchet worker --tags`` and ``ratchet jobs stranded``: node tags from the command line."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sample_jobs
from click.testing import CliRunner, Result

from ratchet import JobStatus, Ratchet
from ratchet.cli import main
from ratchet.domain.affinity import Affinity
from ratchet.testing import FakeClock


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_worker_refuses_a_malformed_tag_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Any] = []
    monkeypatch.setattr("ratchet.cli.load_app", lambda spec: started.append(spec))
    result = run("worker", "some.module:app", "--tags", "gpu,nvidia card")
    assert result.exit_code == 2, result.output
    assert "Invalid value for --tags" in result.output
    assert "'nvidia card' is malformed" in result.output
    assert started == [], "the app is not even loaded"


def test_worker_passes_its_tags_to_the_worker_config(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    class App:
        def run_worker(self, config: Any) -> None:
            seen.append(config)

    monkeypatch.setattr("ratchet.cli.load_app", lambda spec: App())
    result = run("worker", "some.module:app", "--tags", " GPU, eu ,", "--concurrency", "2")
    assert result.exit_code == 0, result.output
    [config] = seen
    assert (config.tags, config.concurrency) == (frozenset({"gpu", "eu"}), 2)


def test_jobs_stranded_lists_what_no_live_node_may_run(sqlite_url: str, clock: FakeClock) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], clock=clock)
    gpu = app.enqueue(sample_jobs.record, 1).with_require_tags("gpu").submit()
    app.enqueue(sample_jobs.record, 2).submit()  # runs anywhere: never stranded
    not_eu = app.enqueue(sample_jobs.record, 3).with_exclude_tags("eu").submit()
    app.close()
    result = run("jobs", "stranded", "--url", sqlite_url)
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["JOB", "ID", "STATUS", "REQUIRES", "EXCLUDES", "TARGET"]
    assert sorted(r.split()[:4] for r in rows) == sorted(
        [[str(gpu.id), "PENDING", "gpu", "-"], [str(not_eu.id), "PENDING", "-", "eu"]]
    )
    shown = json.loads(run("jobs", "show", "--json", "--url", sqlite_url, str(not_eu.id)).stdout)
    assert (shown["require_tags"], shown["exclude_tags"]) == ([], ["eu"])
    # a worker that may run both drains the list
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], clock=clock)
    worker = app.worker(concurrency=4, tags="gpu")
    worker.run_claimed(worker.poll_once())
    assert gpu.status() is JobStatus.SUCCEEDED and not_eu.status() is JobStatus.SUCCEEDED
    assert app.get_job(gpu.id).affinity == Affinity(frozenset({"gpu"}))
    app.close()
    result = run("jobs", "stranded", "--url", sqlite_url)
    assert result.stdout.startswith("no stranded jobs"), result.output
