"""``ratchet keys``: the encryption keys of stored job arguments (docs/security.md, "Rotation")."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from ratchet.domain.errors import ConfigurationError
from ratchet.ports import EncryptionKeyStore, KeyUsage

URL_ENV = "RATCHET_URL"


@click.group()
def keys() -> None:
    """Encryption keys: make one, report which keys the stored jobs need."""


@keys.command("generate")
def keys_generate() -> None:
    """Print a new random AES-256 key (base64) for RATCHET_ENCRYPTION_KEYS."""
    from ratchet.encryption import generate_key

    click.echo(generate_key())


def _current_key(app: Any, given: str | None) -> str | None:
    if given is not None:
        return given
    cipher = app.protection.cipher
    return None if cipher is None else str(cipher.current_key_id())


def _state(usage: KeyUsage, current: str | None) -> str:
    if usage.key_id is None:
        return "plaintext"
    if current is None:
        return "?"
    return "current" if usage.key_id == current else "old"


@keys.command("report")
@click.option("--url", help=f"Database URL (or ${URL_ENV}).")
@click.option("--app", "app_spec", help="MODULE:APP instead of --url.")
@click.option(
    "--current",
    help="The current key id (default: the key provider's, from --app or the environment).",
)
@click.option(
    "--list",
    "list_jobs",
    type=click.IntRange(0, 10_000),
    default=0,
    show_default=True,
    help="Also list up to this many job ids per old key, live jobs first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--check",
    is_flag=True,
    help="Exit with code 1 while a live job still needs an old key.",
)
def keys_report(
    url: str | None,
    app_spec: str | None,
    current: str | None,
    list_jobs: int,
    as_json: bool,
    check: bool,
) -> None:
    """Count the stored jobs per key of their arguments, marking the old keys."""
    from ratchet.cli import _admin_app

    app = _admin_app(url or os.environ.get(URL_ENV), app_spec)
    store = app.store.capability(EncryptionKeyStore)
    if store is None:
        raise ConfigurationError("this store cannot report encryption key usage")
    current = _current_key(app, current)
    usage = store.key_usage()
    rows = []
    for u in usage:
        state = _state(u, current)
        row: dict[str, Any] = {"key_id": u.key_id, "state": state, "live": u.live, "total": u.total}
        if list_jobs and state == "old" and u.key_id is not None:
            row["jobs"] = [str(j) for j in store.jobs_on_key(u.key_id, list_jobs)]
        rows.append(row)
    if as_json:
        click.echo(json.dumps({"current": current, "keys": rows}, indent=2))
    elif not rows:
        click.echo("no jobs")
    else:
        click.echo(_FORMAT.format("KEY ID", "STATE", "LIVE", "TOTAL"))
        for row in rows:
            name = "(none)" if row["key_id"] is None else row["key_id"]
            click.echo(_FORMAT.format(name, row["state"], row["live"], row["total"]))
            for job_id in row.get("jobs", ()):
                click.echo(f"  {job_id}")
    if check and any(r["state"] == "old" and r["live"] for r in rows):
        live = sum(r["live"] for r in rows if r["state"] == "old")
        raise click.ClickException(f"{live} live job(s) still need an old key; keep those keys")


_FORMAT = "{:<32}  {:<9}  {:>8}  {:>8}"
