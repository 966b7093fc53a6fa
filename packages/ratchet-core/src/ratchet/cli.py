"""The ``ratchet`` command. User mistakes print one line and exit non-zero, never a traceback."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from ratchet.cli_retention import log_document
from ratchet.cli_retention import register as register_retention_commands
from ratchet.domain.affinity import InvalidTag
from ratchet.domain.affinity import node_tags as parse_node_tags
from ratchet.domain.errors import ConfigurationError, RatchetError
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import AttemptRecord, JobRecord
from ratchet.keys_cli import keys

URL_ENV = "RATCHET_URL"


#: What click raises to show a group's help when its command is missing (click >= 8.2).
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Group(click.Group):
    """Turns Ratchet's typed errors and database errors into one clear line and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a bad option or argument of a subcommand
            if isinstance(exc, _NO_ARGS_IS_HELP):  # a group without its command: its help
                raise
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            click.echo(f"error: {_one_line(exc.format_message())}{hint}", err=True)
            ctx.exit(2)
        except (RatchetError, ValueError) as exc:
            click.echo(f"error: {_one_line(str(exc))}", err=True)
            ctx.exit(2)
        except Exception as exc:
            if not type(exc).__module__.startswith("sqlalchemy"):
                raise
            orig = getattr(exc, "orig", None)  # the driver's message, without SQL and parameters
            text = str(orig if orig is not None else exc).split("\n[SQL:")[0]
            click.echo(f"error: the database refused: {_one_line(text)}", err=True)
            ctx.exit(2)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_extension_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        entry = _extension_commands().get(cmd_name)
        if entry is None:
            return None
        command = entry.load()
        if not isinstance(command, click.Command):
            raise click.ClickException(
                f"the {COMMANDS_GROUP} entry point {cmd_name!r} ({entry.value}) is not a click "
                "command"
            )
        return command


#: Entry point group through which other distributions add ``ratchet`` subcommands (for
#: example ``ratchet dashboard`` of ratchet-dashboard); each names a click command.
COMMANDS_GROUP = "ratchet.commands"


def _extension_commands() -> dict[str, Any]:
    """The installed ``ratchet.commands`` entry points by name (loaded only when invoked)."""
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}


def _one_line(text: str) -> str:
    """``text`` with its line breaks (drivers' messages have some) folded into spaces."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def load_app(spec: str) -> Any:
    """Import ``module:attribute`` (the current directory is importable) and return the app: a
    :class:`~ratchet.Ratchet`, or a factory that takes no argument and returns one.

    :raises ConfigurationError: one line saying what ``spec`` names instead and what to give.
    """
    from ratchet.engine.app import Ratchet

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"expected MODULE:APP (e.g. myapp.jobs:app), got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name or ""
        top = module_name.split(".")[0]
        if missing == top:
            raise ConfigurationError(
                f"cannot import {module_name!r}: {exc} (modules are looked up from the working "
                f"directory {cwd} and PYTHONPATH: run the command from the directory that "
                f"contains {top!r}, or add that directory to PYTHONPATH)"
            ) from None
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from None
        raise ConfigurationError(f"importing {module_name!r} failed: {exc}") from None
    apps = [
        f"{module_name}:{name}"
        for name, value in vars(module).items()
        if isinstance(value, Ratchet)
    ]
    hint = f"; did you mean {' or '.join(apps)}?" if apps else ""
    if not hasattr(module, attr):
        raise ConfigurationError(f"module {module_name!r} has no attribute {attr!r}{hint}")
    found = getattr(module, attr)
    if isinstance(found, Ratchet):
        return found
    why = _not_a_factory(found, module)
    if why is not None:
        raise ConfigurationError(f"{spec} is not a Ratchet app or app factory: {why}{hint}")
    app = found()
    if not isinstance(app, Ratchet):
        raise ConfigurationError(
            f"{spec} is not a Ratchet app or app factory: calling it returned "
            f"{type(app).__name__}{hint}"
        )
    return app


def _not_a_factory(found: Any, module: Any) -> str | None:
    """Why ``found`` cannot be an app factory (None: it may be one, so it is called)."""
    import inspect

    from ratchet.engine.app import Ratchet

    if not callable(found):
        return f"it is a {type(found).__name__}"
    if isinstance(found, type):
        return f"it is the class {found.__qualname__}"
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):
        return None
    name = getattr(found, "__qualname__", repr(found))
    required = [
        p
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        return f"it is the function {name}{signature}, which needs arguments"
    returns = signature.return_annotation
    if returns is not signature.empty:
        names_app = (
            "Ratchet" in returns
            if isinstance(returns, str)
            else isinstance(returns, type) and issubclass(returns, Ratchet)
        )
        if names_app:
            return None
        return f"it is the function {name}{signature}, which does not return an app"
    for value in vars(module).values():
        if isinstance(value, Ratchet) and value.class_policy.is_allowed(
            getattr(found, "__module__", ""), name
        ):
            return f"it is the function {name}{signature}, a job of this module's app"
    return None


def _sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite://`` URL (None: another database, or in memory)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:
        return None
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or not database:
        return None
    if database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _admin_app(url: str | None, app_spec: str | None, *, must_exist: bool = True) -> Any:
    """The app a command works on: ``--app``'s, or one on ``--url`` that never migrates.

    :param must_exist: refuse a SQLite file that does not exist (instead of creating it empty).
    """
    from ratchet.engine.app import Ratchet

    if app_spec:
        return load_app(app_spec)
    url = url or configured_url()
    if not url:
        raise click.UsageError(
            f"give --url (or set {URL_ENV}, or url in the config file) or --app module:app"
        )
    path = _sqlite_path(url)
    if must_exist and path is not None and not path.exists():
        raise ConfigurationError(
            f"there is no SQLite database at {path.resolve()} (a relative path is read from the "
            f"working directory); check --url, or create it with `ratchet db upgrade --url {url}`"
        )
    app = Ratchet(url, allow_empty_class_policy=True, auto_migrate=False)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(app.close)  # its connections go when the command ends
    return app


def configured_url() -> str | None:
    """The store URL of ``RATCHET_URL`` or the config file (None: neither sets one)."""
    from ratchet.settings import load_settings

    settings = load_settings()
    entry = next(e for e in settings.entries if e.name == "url")
    return None if entry.source == "default" else str(entry.value)


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


@click.group(cls=_Group)
@click.version_option(package_name="ratchet-core")
def main() -> None:
    """Ratchet for Python: a persistent, database-backed job scheduler."""


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), help="Job slots (default 64).")
@click.option(
    "--batch-size", type=click.IntRange(min=1), help="Most jobs claimed per poll (default 200)."
)
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
@click.option(
    "--claim-ahead",
    type=click.FloatRange(min=0),
    help="Seconds jobs claimed beyond the threads may wait for one (default 0.05; 0: none).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per record, with job_id, attempt and node_id keys.",
)
@click.option(
    "--otel",
    is_flag=True,
    help="Trace attempts with OpenTelemetry (needs ratchet-core[otel]; the app sets up the SDK).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on this port (needs ratchet-core[prometheus]).",
)
@click.option(
    "--metrics-address",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics endpoint binds to (0.0.0.0: every interface).",
)
@click.option("--metrics-interval", type=float, help="Seconds between gauge samples.")
@click.option(
    "--tags",
    default="",
    help="Node tags, comma-separated (gpu,eu): only jobs whose affinity they satisfy run here.",
)
@click.option(
    "--pool-size",
    type=click.IntRange(min=1),
    help="Store connections kept per process (default 10; idle ones beyond one close after 30 s).",
)
@click.option(
    "--max-overflow",
    type=click.IntRange(min=0),
    help="Store connections opened beyond --pool-size under bursts (default 20).",
)
def worker(
    app_spec: str,
    concurrency: int | None,
    batch_size: int | None,
    log_level: str,
    log_format: str,
    otel: bool,
    metrics_port: int | None,
    metrics_address: str,
    tags: str,
    pool_size: int | None,
    max_overflow: int | None,
    **delays: float | None,
) -> None:
    """Run a worker for MODULE:APP until SIGTERM or SIGINT, then drain.

    Settings not given as options come from RATCHET_* variables, then the config file."""
    from ratchet.engine.collector import freeze_startup_heap
    from ratchet.logformat import configure_worker_logging
    from ratchet.settings import load_settings, worker_config_from_env

    try:
        node_tags = parse_node_tags(tags)
    except InvalidTag as exc:
        raise click.BadParameter(str(exc), param_hint="--tags") from None

    configure_worker_logging(log_level, log_format, trace_ids=otel)
    pool = load_settings({"pool_size": pool_size, "max_overflow": max_overflow}).pool_options()
    app = load_app(app_spec)
    if pool:
        _resize_pool(app, pool)
    if otel and app.tracer is None:
        app.enable_tracing("otel")
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
        "metrics_interval": "metrics_interval",
        "claim_ahead": "claim_ahead",
    }
    options: dict[str, Any] = {names[k]: _seconds(v) for k, v in delays.items() if v is not None}
    if soft_percent is not None:
        options["soft_timeout_percent"] = soft_percent
    options.update({k: v for k, v in counts.items() if v is not None})
    config = worker_config_from_env(
        concurrency=concurrency, batch_size=batch_size, tags=node_tags, **options
    )
    if metrics_port is not None:
        from ratchet.exporters.prometheus import serve_app

        server = serve_app(app, metrics_port, metrics_address)
        logging.getLogger("ratchet.worker").info(
            "serving metrics on http://%s:%d/metrics", metrics_address, server.port
        )
    freeze_startup_heap()  # this process exists to run the worker
    app.run_worker(config)


def _resize_pool(app: Any, pool: dict[str, int]) -> None:
    """Give the app's store the pool sizes of ``--pool-size`` / ``RATCHET_POOL_SIZE`` & co."""
    resize = getattr(app.store, "resize_pool", None)
    if resize is None or not resize(pool.get("pool_size"), pool.get("max_overflow")):
        logging.getLogger("ratchet.worker").warning(
            "the store (%s) has no connection pool to size; ignoring %s",
            type(app.store).__name__,
            ", ".join(f"{k}={v}" for k, v in pool.items()),
        )


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

    app = _admin_app(url, None, must_exist=False)
    app.store.migrate()
    click.echo(f"schema at revision(s) {', '.join(current_revisions(app.store))}")


@main.group()
def jobs() -> None:
    """Inspect and manage jobs."""


_url_option = click.option("--url", help=f"Database URL (or ${URL_ENV}).")
_app_option = click.option("--app", "app_spec", help="MODULE:APP instead of --url.")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _done(as_json: bool, action: str, ident: str) -> None:
    """Report an operator action that succeeded: ``{"id": ..., "action": ...}`` or a line."""
    if as_json:
        click.echo(json.dumps({"id": ident, "action": action}))
    else:
        click.echo(f"{action} {ident}")


def _instant(
    ctx: click.Context | None, param: click.Parameter | None, value: str | None
) -> datetime | None:
    """An ISO-8601 option as an aware datetime (without an offset: UTC)."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO-8601 date-time (e.g. 2026-03-01T12:00:00+00:00)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _uuid_option(
    ctx: click.Context | None, param: click.Parameter | None, value: str | None
) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an id (a UUID)") from None


@jobs.command("list")
@_url_option
@_app_option
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in JobStatus], case_sensitive=False),
    help="Only jobs in this status (repeat for several).",
)
@click.option("--tag", help="Only jobs carrying this tag.")
@click.option("--target", help="Only jobs of this target (module:function).")
@click.option("--business-key", help="Only jobs with this business key.")
@click.option("--created-after", callback=_instant, help="ISO-8601; created at or after.")
@click.option("--created-before", callback=_instant, help="ISO-8601; created before.")
@click.option("--finished-after", callback=_instant, help="ISO-8601; ended at or after.")
@click.option("--finished-before", callback=_instant, help="ISO-8601; ended before.")
@click.option("--recurring", callback=_uuid_option, help="Occurrences of this recurring master.")
@click.option("--batch", callback=_uuid_option, help="Children of this batch.")
@click.option("--workflow", callback=_uuid_option, help="Jobs of the flow started by this job.")
@click.option("--cursor", help="Continue after the page that printed this cursor.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"jobs": [...], "next_cursor": ...} (jobs with the fields of `jobs show`).',
)
def jobs_list(
    url: str | None,
    app_spec: str | None,
    statuses: tuple[str, ...],
    cursor: str | None,
    limit: int,
    as_json: bool,
    **filters: Any,
) -> None:
    """List jobs, newest first, one page at a time."""
    from ratchet.domain.query import JobQuery

    query = JobQuery(
        statuses=tuple(JobStatus(s.upper()) for s in statuses),
        tag=filters["tag"],
        target=filters["target"],
        business_key=filters["business_key"],
        created_after=filters["created_after"],
        created_before=filters["created_before"],
        finished_after=filters["finished_after"],
        finished_before=filters["finished_before"],
        recurring_master_id=filters["recurring"],
        batch_id=filters["batch"],
        workflow_id=filters["workflow"],
    )
    app = _admin_app(url, app_spec)
    page = app.jobs.list(query, cursor=cursor, limit=limit)
    if as_json:
        docs = [job_document(rec) for rec in page]
        click.echo(json.dumps({"jobs": docs, "next_cursor": page.next_cursor}, indent=2))
        return
    if not page.items:
        wanted = [f"status {' or '.join(s.upper() for s in statuses)}"] if statuses else []
        wanted += [f"{k.replace('_', ' ')} {v!r}" for k, v in filters.items() if v is not None]
        click.echo(f"no jobs match {' and '.join(wanted)}" if wanted else "no jobs")
        return
    click.echo(_LIST_FORMAT.format("JOB ID", "STATUS", "PRIORITY", "ATTEMPTS", "CREATED", "TARGET"))
    for rec in page:
        click.echo(
            _LIST_FORMAT.format(
                str(rec.job_id),
                rec.status.value,
                rec.priority.name,
                rec.attempts_started,
                rec.created_at.isoformat(timespec="seconds"),
                rec.target,
            )
        )
    if page.next_cursor is not None:
        click.echo(f"more: --cursor {page.next_cursor}")


_LIST_FORMAT = "{:<36}  {:<9}  {:<8}  {:>8}  {:<25}  {}"


def _json_text(text: str | None) -> Any:
    """Stored JSON as a JSON value (text that is not JSON stays a string)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _seconds_of(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def job_document(rec: JobRecord) -> dict[str, Any]:
    """A job as JSON: arguments and result as JSON values, ISO 8601 times with their offset,
    durations in seconds; ``attempts`` counts the attempts started (as ``jobs list`` does)."""
    return {
        "id": str(rec.job_id),
        "status": rec.status.value,
        "target": rec.target,
        "payload": _json_text(rec.payload),
        "result": _json_text(rec.result),
        "last_error": rec.last_error,
        "priority": rec.priority.name,
        "attempts": rec.attempts_started,
        "failed_attempts": rec.attempts,
        "max_retries": rec.max_retries,
        "backoff": rec.backoff.value,
        "backoff_delay_seconds": _seconds_of(rec.backoff_delay),
        "timeout_seconds": _seconds_of(rec.timeout),
        "tags": list(rec.tags),
        "params": dict(rec.params),
        "created_at": _when(rec.created_at),
        "scheduled_time": _when(rec.scheduled_time),
        "picked_at": _when(rec.picked_at),
        "terminated_at": _when(rec.terminated_at),
        "picked_by": rec.picked_by,
        "paused_from": rec.paused_from.value if rec.paused_from else None,
        "idempotency_key": rec.idempotency_key,
        "business_key": rec.business_key,
        "superseded_by": str(rec.superseded_by) if rec.superseded_by else None,
        "executor": rec.executor,
        "resource_name": rec.resource_name,
        "recurring_master_id": str(rec.recurring_master_id) if rec.recurring_master_id else None,
        "caller_principal": rec.caller_principal,
        "encryption_key_id": rec.encryption_key_id,
        "require_tags": sorted(rec.affinity.require),
        "exclude_tags": sorted(rec.affinity.exclude),
        "schedule_to_start_seconds": _seconds_of(rec.schedule_to_start),
        "takeover_policy": rec.takeover_policy.value if rec.takeover_policy else None,
    }


def attempt_document(attempt: AttemptRecord) -> dict[str, Any]:
    """One row of a job's attempt history as JSON."""
    duration = None if attempt.finished_at is None else attempt.finished_at - attempt.started_at
    return {
        "attempt": attempt.attempt,
        "epoch": attempt.epoch,
        "node": attempt.node_id,
        "outcome": attempt.outcome,
        "started_at": _when(attempt.started_at),
        "finished_at": _when(attempt.finished_at),
        "duration_seconds": _seconds_of(duration),
        "error": attempt.error,
        "traceback": attempt.traceback,
    }


def _job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a job id (a UUID)") from None


@jobs.command("stranded")
@_url_option
@_app_option
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def jobs_stranded(url: str | None, app_spec: str | None, limit: int) -> None:
    """List waiting jobs that no live worker's --tags may run, oldest first."""
    app = _admin_app(url, app_spec)
    stranded = app.stranded_jobs(limit)
    if not stranded:
        click.echo("no stranded jobs: every waiting job with tag affinity has a live node")
        return
    click.echo(_STRANDED_FORMAT.format("JOB ID", "STATUS", "REQUIRES", "EXCLUDES", "TARGET"))
    for s in stranded:
        click.echo(
            _STRANDED_FORMAT.format(
                str(s.job_id),
                s.status,
                ",".join(sorted(s.affinity.require)) or "-",
                ",".join(sorted(s.affinity.exclude)) or "-",
                s.target,
            )
        )


_STRANDED_FORMAT = "{:<36}  {:<9}  {:<20}  {:<20}  {}"


@jobs.command("show")
@_url_option
@_app_option
@click.argument("job_id")
@click.option(
    "--traceback",
    "show_traceback",
    is_flag=True,
    help="Print only the traceback of the job's newest failed attempt.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the job and its attempts as JSON.")
def jobs_show(
    url: str | None, app_spec: str | None, job_id: str, show_traceback: bool, as_json: bool
) -> None:
    """Show one job and its attempts: outcome, error and traceback of each."""
    from ratchet.domain.errors import JobNotFound

    ident = _job_id(job_id)
    app = _admin_app(url, app_spec)
    try:
        history = app.jobs.history(ident)
    except JobNotFound:
        raise click.ClickException(f"no job {job_id}") from None
    rec = history.job
    if show_traceback:
        failed = [a for a in history.attempts if a.traceback]
        if not failed:
            raise click.ClickException(f"job {job_id} has no failed attempt with a traceback")
        newest = failed[-1]
        click.echo(f"attempt {newest.attempt} on {newest.node_id}: {newest.error}")
        click.echo(newest.traceback.rstrip("\n") if newest.traceback else "")
        return
    doc = job_document(rec)
    doc["epoch"] = rec.epoch  # the listing does not read it for ended jobs
    doc["attempt_history"] = [attempt_document(a) for a in history.attempts]
    doc["logs"] = [log_document(line) for line in app.retention.job_logs(rec.job_id)]
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    from ratchet.cli_format import print_job

    print_job(doc)


@jobs.command("cancel")
@_url_option
@_app_option
@click.argument("job_id")
@click.option(
    "--interrupt",
    is_flag=True,
    help="Also ask a running job to stop at its next safe point (its worker picks this up).",
)
@_json_option
def jobs_cancel(
    url: str | None, app_spec: str | None, job_id: str, interrupt: bool, as_json: bool
) -> None:
    """Cancel a live job."""
    ident = _job_id(job_id)
    app = _admin_app(url, app_spec)
    if not app.cancel_job(ident, interrupt=interrupt):
        raise click.ClickException(f"job {job_id} does not exist or is already finished")
    _done(as_json, "canceled", job_id)


@jobs.command("retry")
@_url_option
@_app_option
@click.argument("job_id")
@_json_option
def jobs_retry(url: str | None, app_spec: str | None, job_id: str, as_json: bool) -> None:
    """Move a dead-lettered (FAILED) job back to PENDING."""
    ident = _job_id(job_id)
    app = _admin_app(url, app_spec)
    if not app.retry_job(ident):
        raise click.ClickException(f"job {job_id} is not in the dead-letter queue")
    _done(as_json, "retrying", job_id)


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


main.add_command(keys)
register_retention_commands(main)
# The operator commands live in their own modules and register themselves on these groups.
from ratchet import cli_ops, cli_recurring  # noqa: E402

cli_ops.register(main, jobs, db)
cli_recurring.register(main)

if __name__ == "__main__":  # pragma: no cover
    main()
