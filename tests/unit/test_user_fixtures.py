"""The fixtures users test their own jobs with, run as a user's test suite would run them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

JOBS = """
CALLS = []

class Flaky(Exception):
    pass

def charge(order_id, fail_first=0):
    CALLS.append(order_id)
    if len(CALLS) <= fail_first:
        raise Flaky(f"gateway busy for order {order_id}")
    return {"charged": order_id}
"""

TESTS = """
from datetime import timedelta

import pytest

from ratchet import BackoffPolicy, JobStatus
from ratchet.testing.fixtures import run_jobs, running_worker

import shopjobs


def test_runs_synchronously_and_retries_after_the_backoff(ratchet_app, ratchet_clock):
    shopjobs.CALLS.clear()
    handle = (
        ratchet_app.enqueue(shopjobs.charge, 7, fail_first=1)
        .with_max_retries(2)
        .with_backoff(BackoffPolicy.FIXED, timedelta(minutes=1))
        .submit()
    )
    assert run_jobs(ratchet_app) == 1
    assert handle.status() is JobStatus.PENDING
    assert run_jobs(ratchet_app) == 0, "the retry waits for its backoff"
    ratchet_clock.advance(timedelta(minutes=2))
    assert run_jobs(ratchet_app) == 1
    assert handle.status() is JobStatus.SUCCEEDED
    assert handle.result() == {"charged": 7}


def test_a_job_outside_the_allowed_modules_is_dead_lettered(ratchet_app):
    import json
    with pytest.raises(Exception, match="class policy"):
        ratchet_app.enqueue(json.dumps, 1).submit()


@pytest.fixture
def real_time_app(tmp_path):
    from ratchet.testing.jobs import make_test_app
    app = make_test_app(["shopjobs"], tmp_path)
    yield app
    app.close()


def test_a_real_worker_runs_them_too(real_time_app):
    handles = [real_time_app.enqueue(shopjobs.charge, n).submit() for n in range(10)]
    with running_worker(real_time_app, concurrency=3) as worker:
        assert worker.wait_until(
            lambda: all(h.status() is JobStatus.SUCCEEDED for h in handles), 30
        )
"""


def run_user_suite(tmp_path: Path, ini: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "shopjobs.py").write_text(textwrap.dedent(JOBS))
    (tmp_path / "test_shop.py").write_text(textwrap.dedent(TESTS))
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["ratchet.testing.fixtures"]\n')
    (tmp_path / "pytest.ini").write_text(ini)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_user_suite_runs_its_jobs_with_the_fixtures(tmp_path: Path) -> None:
    proc = run_user_suite(
        tmp_path, "[pytest]\npythonpath = .\nratchet_allowed_modules = shopjobs\n"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout


def test_without_allowed_modules_the_fixture_says_what_to_set(tmp_path: Path) -> None:
    proc = run_user_suite(tmp_path, "[pytest]\npythonpath = .\n")
    assert proc.returncode == 1
    assert "set ratchet_allowed_modules in pytest.ini" in proc.stdout


@pytest.mark.parametrize("missing", ["jobs", "fixtures"])
def test_the_helpers_do_not_need_pytest_when_imported_alone(missing: str) -> None:
    module = {"jobs": "ratchet.testing.jobs", "fixtures": "ratchet.testing.fixtures"}[missing]
    code = f"import sys, {module}; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("False" if missing == "jobs" else "True")
