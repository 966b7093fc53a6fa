"""``manage.py ratchet_worker``: run a Ratchet worker for the project until SIGTERM / SIGINT."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Run a Ratchet worker on the database of settings.RATCHET: it runs Ratchet jobs and "
        "Django tasks of the RatchetBackend until SIGTERM or SIGINT, then drains."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, help="jobs run at once (slots)")
        parser.add_argument("--batch-size", type=int, help="jobs claimed per poll")
        parser.add_argument("--node-name", help="this worker's name in the cluster")
        parser.add_argument(
            "--drain-timeout", type=float, help="seconds to let running jobs finish on stop"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from ratchet.config import WorkerConfig
        from ratchet.engine.collector import freeze_startup_heap
        from ratchet_django import conf
        from ratchet_django.jobs import build_app, get_app

        worker: dict[str, Any] = dict(conf.current().worker)
        if options["concurrency"] is not None:
            worker["concurrency"] = options["concurrency"]
        if options["batch_size"] is not None:
            worker["batch_size"] = options["batch_size"]
        if options["drain_timeout"] is not None:
            worker["drain_timeout"] = timedelta(seconds=options["drain_timeout"])
        app = build_app(node_name=options["node_name"]) if options["node_name"] else get_app()
        self.stdout.write(f"ratchet worker on {app.store.url}")
        freeze_startup_heap()  # this process exists to run the worker
        app.run_worker(WorkerConfig(**worker))
