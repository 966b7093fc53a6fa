"""Drives examples/django_shop against one database, in a process of its own (Django's settings
are per process): ``python django_shop_scenario.py`` with ``SHOP_DATABASE_URL`` set.

It migrates, places an order that commits and one that is declined (rolled back) through the
views, starts ``manage.py ratchet_worker`` as a child process, waits for the committed order's
job and task, stops the worker with SIGTERM and prints what it saw as one JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

SHOP = Path(__file__).resolve().parents[2] / "examples" / "django_shop"


def main() -> None:
    sys.path.insert(0, str(SHOP))
    os.environ["DJANGO_SETTINGS_MODULE"] = "shop_project.settings"
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client

    import ratchet_django
    from ratchet import JobHandle
    from ratchet_django.compat import SOURCE
    from shop.models import Order
    from shop.tasks import send_receipt

    call_command("migrate", verbosity=0)
    client = Client()
    placed = client.post("/orders/", {"item": "tea", "quantity": 3})
    declined = client.post("/orders/", {"item": "cake", "quantity": 1, "decline": "1"})
    empty = client.post("/orders/", {"item": "air", "quantity": 0}).json()
    body = placed.json()
    app = ratchet_django.get_app()
    jobs_before = sorted(j.target for j in app.list_jobs())
    pending = send_receipt.get_result(body["receipt_task"])
    before = {"status": str(pending.status), "finished": pending.is_finished}

    env = {**os.environ, "PYTHONPATH": str(SHOP)}
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "ratchet_worker", "--concurrency", "2"],
        cwd=SHOP,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        charge = JobHandle(uuid.UUID(body["charge_job"]), app).wait(60)
        receipt = JobHandle(uuid.UUID(body["receipt_task"]), app).wait(60)
        JobHandle(uuid.UUID(empty["receipt_task"]), app).wait(60)
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    result = send_receipt.get_result(body["receipt_task"])
    failed = send_receipt.get_result(empty["receipt_task"])
    print(
        json.dumps(
            {
                "tasks_api": SOURCE,
                "django": django.__version__,
                "placed": placed.status_code,
                "declined": declined.status_code,
                "jobs_before_worker": jobs_before,
                "receipt_before_worker": before,
                "orders": list(Order.objects.order_by("id").values("item", "paid", "receipt_sent")),
                "charge": str(charge),
                "charge_result": JobHandle(uuid.UUID(body["charge_job"]), app).result(),
                "receipt": str(receipt),
                "task_result": {
                    "status": str(result.status),
                    "value": result.return_value if result.is_finished else None,
                    "attempts": result.attempts,
                    "errors": [e.traceback for e in result.errors],
                    "started": result.started_at is not None,
                    "finished": result.finished_at is not None,
                },
                "failed_task": {
                    "status": str(failed.status),
                    "attempts": failed.attempts,
                    "errors": [e.exception_class_path for e in failed.errors],
                    "message_kept": all(
                        "is empty: no receipt" in e.traceback for e in failed.errors
                    ),
                    "exception_class": failed.errors[-1].exception_class.__name__,
                },
                "detail": client.get(f"/receipts/{body['receipt_task']}/").json(),
                "worker_exit": worker.returncode,
                "worker_output": output.decode(errors="replace")[-2000:],
            }
        )
    )


if __name__ == "__main__":
    main()
