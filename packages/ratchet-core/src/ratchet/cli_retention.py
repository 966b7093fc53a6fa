"""The ``ratchet dlq``, ``ratchet prune`` and ``ratchet tombstones`` commands (docs/cli.md).

Registered on the ``ratchet`` group by :mod:`ratchet.cli`; user mistakes print one line (the
group turns Ratchet's typed errors into that), never a traceback.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from ratchet.domain.retention import DeadLetterFilter

if TYPE_CHECKING:
    from ratchet.domain.joblog import JobLogLine
    from ratchet.domain.retention import PruneReport

_url_option = click.option("--url", help="Database URL (or $RATCHET_URL).")
_app_option = click.option(
    "--app", "app_spec", help="MODULE:APP instead of --url (its retention settings apply)."
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _app(url: str | None, app_spec: str | None) -> Any:
    from ratchet.cli import _admin_app

    return _admin_app(url, app_spec)


def _instant(text: str | None, name: str) -> datetime | None:
    """An ISO-8601 instant from the command line (without an offset: UTC)."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO-8601 instant (e.g. 2026-03-01T00:00:00Z)", param_hint=name
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _filter_options(fn: Any) -> Any:
    options = [
        click.option("--target", help="Only this target (module:function)."),
        click.option("--tag", help="Only jobs carrying this tag."),
        click.option("--failed-before", help="Only jobs that failed before this ISO-8601 instant."),
        click.option("--failed-after", help="Only jobs that failed at or after this instant."),
        click.option(
            "--older-than-days",
            type=click.IntRange(0, None),
            help="Only jobs that failed more than this many days ago.",
        ),
        click.option("--error-contains", help="Only jobs whose error contains this text."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _dead_letter_filter(app: Any, options: dict[str, Any]) -> DeadLetterFilter:
    before = _instant(options.get("failed_before"), "--failed-before")
    days = options.get("older_than_days")
    if days is not None:
        by_age = app.now() - timedelta(days=days)
        before = by_age if before is None else min(before, by_age)
    return DeadLetterFilter(
        target=options.get("target"),
        tag=options.get("tag"),
        failed_before=before,
        failed_after=_instant(options.get("failed_after"), "--failed-after"),
        error_contains=options.get("error_contains"),
    )


def _job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a job id (a UUID)") from None


def _short(text: str | None, width: int) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= width else line[: width - 3] + "..."


def log_document(line: JobLogLine) -> dict[str, Any]:
    """One job log line as JSON."""
    return {
        "attempt": line.attempt,
        "epoch": line.epoch,
        "at": line.logged_at.isoformat(),
        "level": line.level.value,
        "message": line.message,
    }


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


# ---------------------------------------------------------------------------- ratchet dlq
@click.group()
def dlq() -> None:
    """The dead-letter queue: jobs that failed for good (FAILED)."""


_ROW = "{:<36}  {:<20}  {:>8}  {:<30}  {}"


@dlq.command("list")
@_url_option
@_app_option
@_filter_options
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--cursor", help="Continue a listing: the `next` value it printed.")
@_json_option
def dlq_list(
    url: str | None,
    app_spec: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
    **filters: Any,
) -> None:
    """List dead letters, most recently failed first, a page at a time."""
    from ratchet.cli import job_document

    app = _app(url, app_spec)
    flt = _dead_letter_filter(app, filters)
    page = app.dlq.list(flt, limit=limit, cursor=cursor)
    if as_json:
        _echo_json({"jobs": [job_document(j) for j in page.jobs], "next": page.next})
        return
    if not page.jobs:
        click.echo("no dead letters" + ("" if flt.is_empty else " match"))
        return
    click.echo(_ROW.format("JOB ID", "FAILED AT", "ATTEMPTS", "TARGET", "ERROR"))
    for job in page.jobs:
        when = job.terminated_at.isoformat(timespec="seconds")[:19] if job.terminated_at else ""
        click.echo(
            _ROW.format(
                str(job.job_id),
                when,
                job.attempts_started,
                _short(job.target, 30),
                _short(job.last_error, 60),
            )
        )
    if page.next:
        click.echo(f"more: --cursor {page.next}")


@dlq.command("show")
@_url_option
@_app_option
@click.argument("job_id")
@_json_option
def dlq_show(url: str | None, app_spec: str | None, job_id: str, as_json: bool) -> None:
    """Show one dead letter: the job, its attempts with their errors, and its log."""
    from ratchet.cli import attempt_document, job_document

    ident = _job_id(job_id)
    app = _app(url, app_spec)
    letter = app.dlq.show(ident)
    if letter is None:
        raise click.ClickException(f"job {job_id} is not in the dead-letter queue")
    if as_json:
        doc = job_document(letter.job)
        doc["attempt_history"] = [attempt_document(a) for a in letter.attempts]
        doc["logs"] = [log_document(line) for line in letter.logs]
        _echo_json(doc)
        return
    job = letter.job
    click.echo(f"job {job.job_id}  {job.target}")
    click.echo(f"failed at {job.terminated_at.isoformat() if job.terminated_at else '?'}")
    click.echo(f"error: {job.last_error}")
    for a in letter.attempts:
        click.echo(f"  attempt {a.attempt} (epoch {a.epoch}) on {a.node_id}: {a.outcome}")
        if a.error:
            click.echo(f"    {_short(a.error, 200)}")
    if letter.logs:
        click.echo("log:")
        for line in letter.logs:
            stamp = line.logged_at.isoformat(timespec="milliseconds")
            click.echo(f"  [{line.attempt}] {stamp} {line.level.value:<5} {line.message}")


def _guard(job_id: str | None, flt: DeadLetterFilter, everything: bool, verb: str) -> None:
    if job_id is not None and (everything or not flt.is_empty):
        raise click.UsageError(f"give a JOB_ID or filters (or --all), not both, to {verb}")
    if job_id is None and flt.is_empty and not everything:
        raise click.UsageError(
            f"say which dead letters to {verb}: a JOB_ID, filters (--target, --tag, "
            "--older-than-days, ...), or --all"
        )


@dlq.command("replay")
@_url_option
@_app_option
@click.argument("job_id", required=False)
@_filter_options
@click.option("--all", "everything", is_flag=True, help="Every dead letter (up to --limit).")
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="Most dead letters replayed (oldest failure first), all or nothing.",
)
@_json_option
def dlq_replay(
    url: str | None,
    app_spec: str | None,
    job_id: str | None,
    everything: bool,
    limit: int,
    as_json: bool,
    **filters: Any,
) -> None:
    """Move dead letters back to PENDING with their attempts reset."""
    app = _app(url, app_spec)
    flt = _dead_letter_filter(app, filters)
    _guard(job_id, flt, everything, "replay")
    if job_id is not None:
        if not app.dlq.replay(_job_id(job_id)):
            raise click.ClickException(f"job {job_id} is not in the dead-letter queue")
        count = 1
    else:
        count = app.dlq.replay_matching(flt, limit)
    if as_json:
        _echo_json({"replayed": count})
    else:
        click.echo(f"replayed {count} dead letter(s)")


@dlq.command("purge")
@_url_option
@_app_option
@_filter_options
@click.option("--all", "everything", is_flag=True, help="Every dead letter.")
@click.option("--dry-run", is_flag=True, help="Count what would go; remove nothing.")
@_json_option
def dlq_purge(
    url: str | None,
    app_spec: str | None,
    everything: bool,
    dry_run: bool,
    as_json: bool,
    **filters: Any,
) -> None:
    """Remove dead letters (with their attempts and logs) for good."""
    app = _app(url, app_spec)
    flt = _dead_letter_filter(app, filters)
    _guard(None, flt, everything, "purge")
    count = app.dlq.purge(flt, dry_run=dry_run)
    if as_json:
        _echo_json({"purged": count, "dry_run": dry_run})
    else:
        click.echo(f"{'would purge' if dry_run else 'purged'} {count} dead letter(s)")


# ---------------------------------------------------------------------------- ratchet prune
def _report_document(report: PruneReport) -> dict[str, Any]:
    return {
        "removed": report.removed,
        "archived": report.archived,
        "batches": report.batches,
        "dry_run": report.dry_run,
        "complete": report.complete,
    }


@click.command()
@_url_option
@_app_option
@click.option("--dry-run", is_flag=True, help="Count what is due; remove nothing.")
@_json_option
def prune(url: str | None, app_spec: str | None, dry_run: bool, as_json: bool) -> None:
    """Run retention now: remove the ended jobs and job log lines whose period passed."""
    app = _app(url, app_spec)
    report = app.retention.run(dry_run=dry_run)
    if as_json:
        _echo_json(_report_document(report))
        return
    verb = "would remove" if dry_run else "removed"
    settings = app.config.retention
    for status, count in report.removed.items():
        days = settings.job_log_days if status == "job_logs" else None
        what = "job log line(s)" if status == "job_logs" else f"{status} job(s)"
        suffix = f" (older than {days} days)" if days is not None else ""
        click.echo(f"{verb} {count} {what}{suffix}")
    if not report.removed:
        click.echo("nothing is due: every retention period is unset (kept forever)")
    if report.archived:
        click.echo(f"archived {report.archived} job(s) first")


# ---------------------------------------------------------------------------- tombstones
@click.group()
def tombstones() -> None:
    """Idempotency keys: kept forever unless purged here."""


@tombstones.command("purge")
@_url_option
@_app_option
@click.option(
    "--older-than-days",
    type=click.IntRange(0, None),
    help="Purge keys created more than this many days ago.",
)
@click.option(
    "--own-ids",
    is_flag=True,
    help="Purge, whatever their age, the key rows whose key is their job's own id (written"
    " before a job's own id held its key; run once every node runs this version).",
)
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
@_json_option
def tombstones_purge(
    url: str | None,
    app_spec: str | None,
    older_than_days: int | None,
    own_ids: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete old idempotency keys of jobs that are no longer live (the keys become free), or
    with --own-ids the rows of keys that are their jobs' own ids."""
    if (older_than_days is None) == (not own_ids):
        raise click.UsageError("give either --older-than-days N or --own-ids")
    app = _app(url, app_spec)
    if own_ids:
        count = app.retention.purge_own_id_keys(dry_run=dry_run)
        what = "idempotency key row(s) of jobs keyed by their own ids"
    else:
        assert older_than_days is not None
        count = app.retention.purge_tombstones(older_than_days, dry_run=dry_run)
        what = f"idempotency key(s) older than {older_than_days} days"
    if as_json:
        _echo_json({"purged": count, "dry_run": dry_run})
    else:
        click.echo(f"{'would purge' if dry_run else 'purged'} {count} {what}")


def register(group: click.Group) -> None:
    """Add these commands to the ``ratchet`` group."""
    group.add_command(dlq)
    group.add_command(prune)
    group.add_command(tombstones)
