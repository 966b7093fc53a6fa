"""The ``ratchet`` command. User mistakes print one line and exit non-zero, never a traceback."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from ratchet.domain.errors import RatchetError
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import JobFilter

URL_ENV = "RATCHET_URL"


class _Group(click.Group):
    """Turns Ratchet's typed errors into one clear line and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RatchetError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
        except ValueError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


def load_app(spec: str) -> Any:
    """Import ``module:attribute`` (the current directory is importable) and return the app."""
    from ratchet.engine.app import Ratchet

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.UsageError(f"expected module:attribute (e.g. myapp.jobs:app), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.UsageError(f"cannot import {module_name!r}: {exc}") from None
    app = getattr(module, attr, None)
    if callable(app) and not isinstance(app, Ratchet):
        app = app()
    if not isinstance(app, Ratchet):
        raise click.UsageError(f"{spec} is not a Ratchet app (got {type(app).__name__})")
    return app


def _admin_app(url: str | None, app_spec: str | None) -> Any:
    from ratchet.engine.app import Ratchet

    if app_spec:
        return load_app(app_spec)
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise click.UsageError(f"give --url (or set {URL_ENV}) or --app module:app")
    return Ratchet(url, allow_empty_class_policy=True, auto_migrate=False)


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


@click.group(cls=_Group)
@click.version_option(package_name="ratchet-core")
def main() -> None:
    """Ratchet for Python: a persistent, database-backed job scheduler."""


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=50, show_default=True)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option("--min-delay", type=float, help="Seconds between polls at best (normal mode).")
@click.option("--max-delay", type=float, help="Seconds between polls at most (normal mode).")
@click.option("--burst-delay", type=float, help="Seconds between polls after a wakeup.")
@click.option("--deep-idle-delay", type=float, help="Seconds between polls when deeply idle.")
@click.option("--deep-idle-after", type=float, help="Idle seconds before deep idle.")
@click.option("--heartbeat", type=float, help="Seconds between heartbeats.")
@click.option("--orphan-grace", type=float, help="Silent seconds before a node counts as dead.")
@click.option("--orphan-scan", type=float, help="Seconds between scans for dead nodes.")
@click.option("--drain-timeout", type=float, help="Seconds SIGTERM waits for running jobs.")
@click.option("--default-sla", type=float, help="Timeout in seconds of jobs without their own.")
@click.option(
    "--soft-timeout-percent",
    type=click.IntRange(1, 99),
    help="Warn when an attempt reaches this percentage of its timeout.",
)
@click.option(
    "--cancellation-grace",
    type=float,
    help="Seconds before the deadline at which a job is asked to stop at a safe point.",
)
@click.option(
    "--recurring-interval", type=float, help="Seconds between recurring materializer runs."
)
@click.option("--watcher-interval", type=float, help="Seconds between watcher passes.")
@click.option("--queued-stall", type=float, help="Seconds a reserved job waits to start (D_q).")
@click.option("--running-stall", type=float, help="Seconds without progress to TIMED_OUT (D1).")
@click.option("--timed-out-grace", type=float, help="Seconds only the owner may revive (D2).")
@click.option(
    "--takeover-window", type=float, help="Seconds to find a taker, then retry or fail (D3)."
)
@click.option(
    "--max-takeovers", type=click.IntRange(min=0), help="Takeovers before retry or failure."
)
@click.option("--prefetch", type=click.IntRange(min=0), help="Jobs reserved beyond free slots.")
def worker(
    app_spec: str, concurrency: int, batch_size: int, log_level: str, **delays: float | None
) -> None:
    """Run a worker for MODULE:APP until SIGTERM or SIGINT, then drain."""
    from ratchet.config import WorkerConfig

    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [job=%(ratchet_job_id)s] %(message)s",
    )
    from ratchet.engine.context import install_log_record_factory

    install_log_record_factory()
    app = load_app(app_spec)
    soft_percent = delays.pop("soft_timeout_percent", None)
    counts = {k: delays.pop(k, None) for k in ("max_takeovers", "prefetch")}
    names = {
        "min_delay": "min_delay",
        "max_delay": "max_delay",
        "burst_delay": "burst_delay",
        "deep_idle_delay": "deep_idle_delay",
        "deep_idle_after": "deep_idle_after",
        "heartbeat": "heartbeat_interval",
        "orphan_grace": "orphan_grace",
        "orphan_scan": "orphan_scan_interval",
        "drain_timeout": "drain_timeout",
        "default_sla": "default_sla",
        "cancellation_grace": "cancellation_grace",
        "recurring_interval": "recurring_interval",
        "watcher_interval": "watcher_interval",
        "queued_stall": "queued_stall",
        "running_stall": "running_stall",
        "timed_out_grace": "timed_out_grace",
        "takeover_window": "takeover_window",
    }
    options: dict[str, Any] = {names[k]: _seconds(v) for k, v in delays.items() if v is not None}
    if soft_percent is not None:
        options["soft_timeout_percent"] = soft_percent
    options.update({k: v for k, v in counts.items() if v is not None})
    config = WorkerConfig(concurrency=concurrency, batch_size=batch_size, **options)
    app.run_worker(config)


@main.command()
@click.option(
    "--db", type=click.Path(dir_okay=False), help="SQLite file (default: a fresh temp file)."
)
def demo(db: str | None) -> None:
    """Submit a handful of real jobs on SQLite, run a worker until they settle, report."""
    from ratchet.demo import run_demo

    sys.exit(run_demo(db))


@main.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@click.option("--url", help=f"Database URL (or ${URL_ENV}).")
def db_upgrade(url: str | None) -> None:
    """Create or upgrade the schema to the newest revision."""
    from ratchet.sql.migrate import current_revisions

    app = _admin_app(url, None)
    app.store.migrate()
    click.echo(f"schema at revision(s) {', '.join(current_revisions(app.store))}")


@main.group()
def jobs() -> None:
    """Inspect and manage jobs."""


_url_option = click.option("--url", help=f"Database URL (or ${URL_ENV}).")
_app_option = click.option("--app", "app_spec", help="MODULE:APP instead of --url.")


@jobs.command("list")
@_url_option
@_app_option
@click.option("--status", type=click.Choice([s.value for s in JobStatus], case_sensitive=False))
@click.option("--tag")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def jobs_list(
    url: str | None, app_spec: str | None, status: str | None, tag: str | None, limit: int
) -> None:
    """List jobs, newest first."""
    app = _admin_app(url, app_spec)
    flt = JobFilter(statuses=(JobStatus(status.upper()),) if status else (), tag=tag)
    for rec in app.list_jobs(flt, limit):
        click.echo(
            f"{rec.job_id}  {rec.status.value:<9}  p{int(rec.priority)}  a{rec.attempts}  {rec.target}"
        )


def _job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a job id (a UUID)") from None


@jobs.command("show")
@_url_option
@_app_option
@click.argument("job_id")
def jobs_show(url: str | None, app_spec: str | None, job_id: str) -> None:
    """Show one job and its attempt history as JSON."""
    app = _admin_app(url, app_spec)
    rec = app.get_job(_job_id(job_id))
    if rec is None:
        raise click.ClickException(f"no job {job_id}")
    doc = {
        k: (str(v) if not isinstance(v, (int, float, str, type(None), list, dict)) else v)
        for k, v in rec.__dict__.items()
    }
    doc["attempt_history"] = [
        {
            "attempt": a.attempt,
            "epoch": a.epoch,
            "node": a.node_id,
            "outcome": a.outcome,
            "started_at": a.started_at.isoformat(),
            "error": a.error,
        }
        for a in app.attempts(rec.job_id)
    ]
    click.echo(json.dumps(doc, indent=2, default=str))


@jobs.command("cancel")
@_url_option
@_app_option
@click.argument("job_id")
@click.option(
    "--interrupt",
    is_flag=True,
    help="Also ask a running job to stop at its next safe point (its worker picks this up).",
)
def jobs_cancel(url: str | None, app_spec: str | None, job_id: str, interrupt: bool) -> None:
    """Cancel a live job."""
    app = _admin_app(url, app_spec)
    if not app.cancel_job(_job_id(job_id), interrupt=interrupt):
        raise click.ClickException(f"job {job_id} does not exist or is already finished")
    click.echo(f"canceled {job_id}")


@jobs.command("retry")
@_url_option
@_app_option
@click.argument("job_id")
def jobs_retry(url: str | None, app_spec: str | None, job_id: str) -> None:
    """Move a dead-lettered (FAILED) job back to PENDING."""
    app = _admin_app(url, app_spec)
    if not app.retry_job(_job_id(job_id)):
        raise click.ClickException(f"job {job_id} is not in the dead-letter queue")
    click.echo(f"retrying {job_id}")


@main.command()
def plugins() -> None:
    """List installed plugins and the hooks they implement."""
    from ratchet.plugins import Plugins, make_plugin_manager

    facade = Plugins(make_plugin_manager())
    for info in facade.describe():
        dist = f" ({info.distribution})" if info.distribution else " (built-in)"
        click.echo(f"{info.name}{dist}: {', '.join(info.hooks)}")
    click.echo(f"stores: {', '.join(facade.stores)}")
    click.echo(f"coordinators: {', '.join(facade.coordinators)}")
    click.echo(f"executors: {', '.join(facade.executor_providers)}")


@main.group()
def cron() -> None:
    """Quartz cron tools."""


@cron.command("next")
@click.argument("expression")
@click.option("--zone", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--after", help="ISO-8601 instant; fire times strictly after it (default: now).")
@click.option("--count", type=click.IntRange(1, 10_000), default=5, show_default=True)
def cron_next(expression: str, zone: str, after: str | None, count: int) -> None:
    """Print the next fire times of EXPRESSION, one ISO-8601 line each."""
    from ratchet.cron import cron_next_lines

    for line in cron_next_lines(expression, zone, after, count, datetime.now(UTC)):
        click.echo(line)


if __name__ == "__main__":  # pragma: no cover
    main()
