"""``ratchet recurring``: the stored recurring masters, their next fire times, and the operator
actions on them. A master is named by its id or its business key."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import click

from ratchet.cli_format import print_table


def _master(app: Any, ref: str) -> Any:
    """The master ``ref`` names (id, else active business key).

    :raises click.ClickException: none matches.
    """
    try:
        found = app.get_recurring(uuid.UUID(ref))
    except ValueError:
        found = app.find_recurring(ref)
    if found is None:
        raise click.ClickException(f"no recurring master {ref!r} (give its id or business key)")
    return found


def master_document(m: Any) -> dict[str, Any]:
    """A stored master as JSON."""

    def when(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "id": str(m.recurring_id),
        "name": m.name,
        "business_key": m.business_key,
        "cron": m.cron,
        "zone": m.zone,
        "target": m.target,
        "status": m.status.value,
        "paused": m.paused,
        "next_fire": when(m.next_fire),
        "last_fire": when(m.last_fire),
        "source": m.source.value,
        "tags": list(m.tags),
        "created_at": when(m.created_at),
        "ended_at": when(m.ended_at),
    }


def register(main: click.Group) -> None:
    """Add the ``recurring`` group to the ``ratchet`` group."""
    from ratchet.cli import _admin_app, _app_option, _done, _json_option, _url_option

    @main.group("recurring")
    def recurring() -> None:
        """Inspect and manage recurring masters (stored schedules)."""

    @recurring.command("list")
    @_url_option
    @_app_option
    @click.option("--tag", help="Only masters carrying this tag.")
    @click.option("--all", "show_all", is_flag=True, help="Include ended masters.")
    @click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True)
    @_json_option
    def recurring_list(
        url: str | None,
        app_spec: str | None,
        tag: str | None,
        show_all: bool,
        limit: int,
        as_json: bool,
    ) -> None:
        """List masters, oldest first, with their next fire times."""
        app = _admin_app(url, app_spec)
        masters = app.list_recurring(tag=tag, active_only=not show_all, limit=limit)
        docs = [master_document(m) for m in masters]
        if as_json:
            click.echo(json.dumps(docs, indent=2))
            return
        if not docs:
            click.echo("no recurring masters")
            return
        print_table(
            ("ID", "KEY", "CRON", "ZONE", "STATE", "NEXT FIRE", "TARGET"),
            [
                (
                    d["id"],
                    d["business_key"],
                    d["cron"],
                    d["zone"],
                    "PAUSED" if d["paused"] and d["status"] == "ACTIVE" else d["status"],
                    d["next_fire"],
                    d["target"],
                )
                for d in docs
            ],
        )

    @recurring.command("show")
    @_url_option
    @_app_option
    @click.argument("master")
    @click.option(
        "--fires",
        type=click.IntRange(0, 1000),
        default=10,
        show_default=True,
        help="How many of its newest occurrences to list.",
    )
    @_json_option
    def recurring_show(
        url: str | None, app_spec: str | None, master: str, fires: int, as_json: bool
    ) -> None:
        """Show a master (by id or business key) and its newest occurrences."""
        app = _admin_app(url, app_spec)
        found = _master(app, master)
        doc = master_document(found)
        occurrences = app.recurring_fires(found.recurring_id)[-fires:] if fires else []
        doc["occurrences"] = [
            {
                "id": str(j.job_id),
                "status": j.status.value,
                "scheduled_time": j.scheduled_time.isoformat(),
            }
            for j in occurrences
        ]
        if as_json:
            click.echo(json.dumps(doc, indent=2))
            return
        for key in (
            "id",
            "name",
            "business_key",
            "cron",
            "zone",
            "target",
            "status",
            "paused",
            "next_fire",
            "last_fire",
            "source",
            "tags",
            "created_at",
            "ended_at",
        ):
            value = doc[key]
            if value not in (None, []):
                click.echo(f"{key.replace('_', ' '):<13} {value}")
        if doc["occurrences"]:
            click.echo("")
            print_table(
                ("OCCURRENCE", "STATUS", "SCHEDULED"),
                [(o["id"], o["status"], o["scheduled_time"]) for o in doc["occurrences"]],
            )

    def action(name: str, verb: str, past: str, refused: str) -> None:
        @recurring.command(name)
        @_url_option
        @_app_option
        @click.argument("master")
        @_json_option
        def command(url: str | None, app_spec: str | None, master: str, as_json: bool) -> None:
            app = _admin_app(url, app_spec)
            found = _master(app, master)
            if not getattr(app, f"{name}_recurring")(found.recurring_id):
                raise click.ClickException(f"recurring master {master} {refused}")
            _done(as_json, past, str(found.recurring_id))

        command.help = f"{verb} a master (by id or business key)."

    action("pause", "Stop", "paused", "is not active")
    action("resume", "Let fire again from now", "resumed", "is not paused")
    action("cancel", "End for good", "canceled", "is not active")

    @recurring.command("next")
    @_url_option
    @_app_option
    @click.argument("master")
    @click.option("--count", type=click.IntRange(1, 1000), default=5, show_default=True)
    @_json_option
    def recurring_next(
        url: str | None, app_spec: str | None, master: str, count: int, as_json: bool
    ) -> None:
        """Print a master's next fire times: its stored next fire, then the ones after."""
        from ratchet.cron import next_fire_times, resolve_zone

        app = _admin_app(url, app_spec)
        found = _master(app, master)
        times: list[datetime] = []
        if found.next_fire is not None and found.is_active:
            zone = resolve_zone(found.zone)
            first = found.next_fire.astimezone(zone)
            times = [
                first,
                *next_fire_times(found.cron, zone, first, count - 1, now=datetime.now(UTC)),
            ]
        lines = [t.isoformat() for t in times[:count]]
        if as_json:
            click.echo(json.dumps({"id": str(found.recurring_id), "next": lines}))
            return
        if not lines:
            click.echo(f"recurring master {master} will not fire again ({found.status.value})")
        for line in lines:
            click.echo(line)
