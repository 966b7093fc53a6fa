"""Human output of the ``ratchet`` command: aligned tables and the ``jobs show`` page."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``rows`` under ``headers`` in columns two spaces apart (None prints as ``-``); the last
    column is not padded."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *cells]:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    click.echo(table(headers, rows))


def print_job(doc: dict[str, Any]) -> None:
    """A job document (``jobs show --json``) as a page for people: fields, then each attempt
    with its error and traceback."""
    fields = [
        ("id", doc["id"]),
        ("status", doc["status"]),
        ("target", doc["target"]),
        ("priority", doc["priority"]),
        (
            "attempts",
            f"{doc['attempts']} started, {doc['failed_attempts']} failed, "
            f"max retries {doc['max_retries']}",
        ),
        ("created", doc["created_at"]),
        ("scheduled", doc["scheduled_time"]),
        ("ended", doc["terminated_at"]),
        ("picked by", doc["picked_by"]),
        ("tags", ", ".join(doc["tags"]) or None),
        ("business key", doc["business_key"]),
        ("recurring master", doc["recurring_master_id"]),
        ("result", None if doc["result"] is None else json.dumps(doc["result"])),
        ("last error", doc["last_error"]),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        if value is not None:
            click.echo(f"{name.ljust(width)}  {value}")
    history = doc["attempt_history"]
    if not history:
        click.echo("no attempts yet")
        return
    click.echo("")
    print_table(
        ("ATTEMPT", "EPOCH", "NODE", "OUTCOME", "STARTED", "SECONDS", "ERROR CLASS"),
        [
            (
                a["attempt"],
                a["epoch"],
                a["node"],
                a["outcome"],
                a["started_at"],
                None if a["duration_seconds"] is None else f"{a['duration_seconds']:.3f}",
                error_class(a["error"]),
            )
            for a in history
        ],
    )
    for a in history:
        if a["error"]:
            click.echo(f"\nattempt {a['attempt']}: {a['error']}")
        if a["traceback"]:
            click.echo(a["traceback"].rstrip("\n"))
    logs = doc.get("logs") or []
    if logs:
        click.echo("\nlogs:")
        for line in logs:
            click.echo(f"  #{line['attempt']} {line['at']} {line['level']:<7} {line['message']}")


def error_class(error: str | None) -> str | None:
    """The exception class of an error description (``module.Class: message``)."""
    if not error or ": " not in error:
        return None
    head = error.split(": ", 1)[0]
    return head if " " not in head else None
