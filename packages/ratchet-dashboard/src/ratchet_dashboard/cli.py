"""``ratchet dashboard``: serve the dashboard of a store (found by the ``ratchet`` command
through the ``ratchet.commands`` entry point group)."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import click

from ratchet_dashboard.settings import DashboardSettings, check_bind

URL_ENV = "RATCHET_URL"


def _app(url: str | None, app_spec: str | None) -> Any:
    """The app to show: ``--app``'s, or one on ``--url`` that never migrates the schema."""
    from ratchet import Ratchet
    from ratchet.cli import load_app
    from ratchet.domain.errors import ConfigurationError

    if app_spec:
        return load_app(app_spec)
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise ConfigurationError(f"give --url (or set {URL_ENV}) or --app module:app")
    return Ratchet(url, allow_empty_class_policy=True, auto_migrate=False)


@click.command("dashboard")
@click.option("--url", help=f"Database URL (or ${URL_ENV}).")
@click.option("--app", "app_spec", help="MODULE:APP instead of --url.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--read-only", is_flag=True, help="Show everything, allow no action.")
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
def dashboard(
    url: str | None, app_spec: str | None, host: str, port: int, read_only: bool, log_level: str
) -> None:
    """Serve the web dashboard (http://127.0.0.1:8000/ by default).

    Another --host than a loopback address needs authentication: RATCHET_DASHBOARD_TOKEN, or
    RATCHET_DASHBOARD_USER and RATCHET_DASHBOARD_PASSWORD.
    """
    import uvicorn

    from ratchet_dashboard.app import create_dashboard

    settings = DashboardSettings.from_env()
    if read_only:
        settings = dataclasses.replace(settings, read_only=True)
    check_bind(host, settings)  # before anything connects to the database
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = _app(url, app_spec)
    try:
        require_schema = getattr(app.store, "require_schema", None)
        if require_schema is not None:  # one line now, rather than an error on every page
            require_schema()
        server = create_dashboard(app, settings=settings)
        mode = "read-only" if settings.read_only else "read-write"
        auth = "authenticated" if settings.authenticated else "loopback clients only"
        click.echo(f"ratchet dashboard on http://{host}:{port}/ ({mode}, {auth})", err=True)
        uvicorn.run(server, host=host, port=port, log_level=log_level.lower(), access_log=False)
    finally:
        app.close()
