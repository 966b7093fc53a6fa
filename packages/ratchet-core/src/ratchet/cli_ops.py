"""Operator commands: ``jobs pause|resume``, ``nodes``, ``stats``, ``db current``, ``config
show`` and ``health``. Each prints a table or lines for people, or JSON with ``--json``."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from ratchet.cli_format import print_table


def register(main: click.Group, jobs: click.Group, db: click.Group) -> None:
    """Add the operator commands to the ``ratchet`` group and its ``jobs`` and ``db`` groups."""
    from ratchet.cli import _admin_app, _app_option, _done, _job_id, _json_option, _url_option

    def job_action(name: str, past: str, refused: str, doc: str) -> None:
        """Add ``jobs NAME JOB_ID``, which calls ``app.NAME_job(id)``."""

        @jobs.command(name, help=doc)
        @_url_option
        @_app_option
        @click.argument("job_id")
        @_json_option
        def command(url: str | None, app_spec: str | None, job_id: str, as_json: bool) -> None:
            app = _admin_app(url, app_spec)
            if not getattr(app, f"{name}_job")(_job_id(job_id)):
                raise click.ClickException(f"job {job_id} {refused}")
            _done(as_json, past, job_id)

    job_action(
        "pause",
        "paused",
        "does not exist or cannot be paused now",
        "Hold a PENDING (or reserved) job until it is resumed.",
    )
    job_action(
        "resume", "resumed", "does not exist or is not paused", "Let a PAUSED job run again."
    )

    @main.command("nodes")
    @_url_option
    @_app_option
    @_json_option
    def nodes(url: str | None, app_spec: str | None, as_json: bool) -> None:
        """List worker nodes: state, last heartbeat, slots and the jobs each holds now."""
        app = _admin_app(url, app_spec)
        now = datetime.now(UTC)
        held: dict[str, list[Any]] = {}
        for job in app.jobs.running():
            held.setdefault(job.node_id, []).append(job)
        docs = [
            {
                "node": n.node_id,
                "name": n.node_name,
                "host": n.host,
                "pid": n.pid,
                "state": n.state,
                "started_at": n.started_at.isoformat(),
                "heartbeat_at": n.heartbeat_at.isoformat(),
                "heartbeat_age_seconds": round((now - n.heartbeat_at).total_seconds(), 3),
                "slots": n.slots,
                "jobs": [
                    {"id": str(j.job_id), "status": j.status.value, "target": j.target}
                    for j in held.get(n.node_id, [])
                ],
            }
            for n in app.store.list_nodes()
        ]
        if as_json:
            click.echo(json.dumps(docs, indent=2))
            return
        if not docs:
            click.echo("no nodes")
            return
        print_table(
            ("NODE", "STATE", "HOST", "PID", "HEARTBEAT AGE", "SLOTS", "RUNNING", "TARGETS"),
            [
                (
                    d["node"],
                    d["state"],
                    d["host"],
                    d["pid"],
                    f"{d['heartbeat_age_seconds']:.1f}s",
                    d["slots"],
                    len(d["jobs"]),
                    ", ".join(sorted({j["target"] for j in d["jobs"]})) or None,
                )
                for d in docs
            ],
        )

    @main.command("stats")
    @_url_option
    @_app_option
    @click.option(
        "--window",
        type=click.FloatRange(min=1),
        default=300,
        show_default=True,
        help="Seconds of history for the throughput.",
    )
    @_json_option
    def stats(url: str | None, app_spec: str | None, window: float, as_json: bool) -> None:
        """Queue health: counts by status, what is due, the oldest wait, throughput."""
        app = _admin_app(url, app_spec)
        health = app.jobs.health(window=timedelta(seconds=window))
        counts = app.jobs.count_by_status()
        age = health.oldest_pending_age
        doc = {
            "at": health.at.isoformat(),
            "counts": counts,
            "pending": health.pending,
            "running": health.running,
            "failed": health.failed,
            "due_now": health.due_now,
            "oldest_pending_age_seconds": None if age is None else age.total_seconds(),
            "window_seconds": health.window.total_seconds(),
            "succeeded_in_window": health.succeeded_in_window,
            "failed_in_window": health.failed_in_window,
            "canceled_in_window": health.canceled_in_window,
            "throughput_per_minute": round(health.throughput_per_minute, 3),
            "running_by_node": dict(health.running_by_node),
        }
        if as_json:
            click.echo(json.dumps(doc, indent=2))
            return
        lines = [
            ("pending", health.pending),
            ("due now", health.due_now),
            ("oldest due wait", "-" if age is None else f"{age.total_seconds():.1f}s"),
            ("running", health.running),
            ("failed (DLQ)", health.failed),
            (
                f"last {window:g}s",
                f"{health.succeeded_in_window} succeeded, {health.failed_in_window} failed, "
                f"{health.canceled_in_window} canceled "
                f"({health.throughput_per_minute:.1f}/min)",
            ),
        ]
        for name, value in lines:
            click.echo(f"{name:<16} {value}")
        if counts:
            click.echo("")
            print_table(("STATUS", "JOBS"), sorted(counts.items()))

    @db.command("current")
    @_url_option
    @_json_option
    def db_current(url: str | None, as_json: bool) -> None:
        """Print the schema revision(s) of the database and whether it is up to date."""
        from ratchet.sql.migrate import current_revisions, head_revisions

        app = _admin_app(url, None)
        current = list(current_revisions(app.store))
        heads = list(head_revisions(app.store))
        missing = sorted(set(heads) - set(current))
        if as_json:
            doc = {"current": current, "heads": heads, "up_to_date": not missing}
            click.echo(json.dumps(doc))
            return
        if not current:
            click.echo("no Ratchet schema (run `ratchet db upgrade`)")
        else:
            state = "up to date" if not missing else f"behind: lacks {', '.join(missing)}"
            click.echo(f"revision(s) {', '.join(current)} ({state})")

    @main.group("config")
    def config() -> None:
        """Configuration commands."""

    @config.command("show")
    @click.option(
        "--config-file",
        type=click.Path(dir_okay=False),
        help="TOML file to read (default: $RATCHET_CONFIG_FILE).",
    )
    @_json_option
    def config_show(config_file: str | None, as_json: bool) -> None:
        """Print every setting's effective value and where it came from (secrets hidden)."""
        from ratchet.settings import load_settings

        rows = load_settings(config_file=config_file).describe()
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        print_table(
            ("SETTING", "VALUE", "SOURCE"),
            [
                (
                    r["env"],
                    json.dumps(r["value"]) if not isinstance(r["value"], str) else r["value"],
                    r["source"],
                )
                for r in rows
            ],
        )

    @main.command("health")
    @_url_option
    @_app_option
    @click.option(
        "--node",
        help="Also require a live incarnation of this node name (or host) with a fresh "
        "heartbeat: a liveness probe for the worker.",
    )
    @click.option(
        "--max-silence",
        type=click.FloatRange(min=0.1),
        default=30.0,
        show_default=True,
        help="Seconds since the node's last heartbeat that still count as alive.",
    )
    @_json_option
    def health(
        url: str | None,
        app_spec: str | None,
        node: str | None,
        max_silence: float,
        as_json: bool,
    ) -> None:
        """Readiness (database reachable, schema current) and, with --node, liveness.
        Exit 0 when healthy, 1 when not, with one line saying why."""
        checks = run_health(url, app_spec, node, max_silence)
        failed = [c for c in checks if not c["ok"]]
        if as_json:
            click.echo(json.dumps({"healthy": not failed, "checks": checks}))
        else:
            for check in checks:
                mark = "ok" if check["ok"] else "FAIL"
                click.echo(f"{mark:<4} {check['check']}: {check['detail']}")
        if failed:
            sys.exit(1)


def _one_line_error(exc: BaseException) -> str:
    """``exc`` as one line without credentials (a driver's message may hold its URL)."""
    from ratchet.domain.sanitize import SanitizePolicy, sanitize_text

    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).split("\n[SQL:")[0]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return sanitize_text(f"{type(exc).__name__}: {first}", SanitizePolicy(), traceback=False)


def run_health(
    url: str | None, app_spec: str | None, node: str | None, max_silence: float
) -> list[dict[str, Any]]:
    """The probe's checks, each ``{"check", "ok", "detail"}``; stops at the first failure."""
    from ratchet.cli import _admin_app
    from ratchet.domain.errors import RatchetError

    checks: list[dict[str, Any]] = []
    try:
        app = _admin_app(url, app_spec)
        engine = getattr(app.store, "engine", None)
        if engine is None:
            app.store.database_time()
        else:  # reachable, whether or not the schema is there yet
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
    except Exception as exc:  # a typed error or the driver's: one line, without secrets
        return [{"check": "database", "ok": False, "detail": _one_line_error(exc)}]
    checks.append({"check": "database", "ok": True, "detail": "reachable"})
    try:
        require_schema = getattr(app.store, "require_schema", None)
        if require_schema is not None:
            require_schema()
    except RatchetError as exc:
        checks.append({"check": "schema", "ok": False, "detail": str(exc)})
        return checks
    checks.append({"check": "schema", "ok": True, "detail": "current"})
    if node is not None:
        now = datetime.now(UTC)
        alive = [
            n
            for n in app.store.list_nodes()
            if node in (n.node_name, n.host, n.node_id) and n.state in ("ALIVE", "DRAINING")
        ]
        if not alive:
            checks.append({"check": "node", "ok": False, "detail": f"no live node {node!r}"})
            return checks
        newest = max(alive, key=lambda n: n.heartbeat_at)
        age = (now - newest.heartbeat_at).total_seconds()
        ok = age <= max_silence
        detail = f"{newest.node_id} {newest.state}, last heartbeat {age:.1f}s ago"
        checks.append({"check": "node", "ok": ok, "detail": detail})
    return checks
