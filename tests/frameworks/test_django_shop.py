"""examples/django_shop against real databases: a view enqueues a job and a Django task inside
``transaction.atomic()``, ``manage.py ratchet_worker`` runs both, the task's ``TaskResult`` shows
its value; a declined (rolled-back) order leaves neither an order nor a job.

Each case runs the scenario in a child process (Django's settings belong to a process) on the
interpreter running the tests: Django 5.2 with the django-tasks backport on Python 3.11, Django 6
with ``django.tasks`` on 3.12+ (``python3 dev.py test`` runs this module on both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).resolve().parents[1] / "support" / "django_shop_scenario.py"


def run_scenario(url: str) -> dict[str, Any]:
    env = {**os.environ, "SHOP_DATABASE_URL": url}
    done = subprocess.run(
        [sys.executable, str(SCENARIO)], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def check(seen: dict[str, Any]) -> None:
    expected_api = "django.tasks" if sys.version_info >= (3, 12) else "django_tasks"
    assert seen["tasks_api"] == expected_api
    assert seen["placed"] == 201
    assert seen["declined"] == 402
    # The declined order's job and task rolled back with it: two orders, each a job and a task.
    assert seen["jobs_before_worker"] == [
        "ratchet_django.runner:run_task",
        "ratchet_django.runner:run_task",
        "shop.jobs:charge_order",
        "shop.jobs:charge_order",
    ]
    assert seen["receipt_before_worker"] == {"status": "READY", "finished": False}
    assert seen["orders"] == [
        {"item": "tea", "paid": True, "receipt_sent": True},
        {"item": "air", "paid": True, "receipt_sent": False},
    ]
    assert seen["charge"] == "SUCCEEDED"
    assert seen["charge_result"] == {"order": 1, "charged_cents": 3 * 1250}
    assert seen["receipt"] == "SUCCEEDED"
    task = seen["task_result"]
    assert task == {
        "status": "SUCCESSFUL",
        "value": "receipt for order 1: 3 x tea",
        "attempts": 1,
        "errors": [],
        "started": True,
        "finished": True,
    }
    # The empty order's receipt failed on every attempt: 1 + MAX_RETRIES (3), each an error.
    assert seen["failed_task"] == {
        "status": "FAILED",
        "attempts": 4,
        "errors": ["builtins.ValueError"] * 4,
        "message_kept": True,
        "exception_class": "ValueError",
    }
    assert seen["detail"] == {
        "status": "SUCCESSFUL",
        "attempts": 1,
        "value": "receipt for order 1: 3 x tea",
    }
    assert seen["worker_exit"] == 0, seen["worker_output"]


@pytest.mark.postgres
def test_shop_on_postgres(postgres_store_url: str) -> None:
    check(run_scenario(postgres_store_url))


@pytest.mark.mysql
def test_shop_on_mariadb(mysqlclient_store_url: str) -> None:
    check(run_scenario(mysqlclient_store_url))


def test_shop_on_sqlite(tmp_path: Path) -> None:
    check(run_scenario(f"sqlite:///{tmp_path / 'shop.sqlite3'}"))
