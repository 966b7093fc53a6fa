"""The worker passes every failure through ``ratchet_sanitize_error`` before it is stored,
emitted or logged; a plugin can replace the built-in sanitiser."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet import Ratchet, hookimpl
from ratchet.events import JobEvent
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.testing import FakeClock

PLANTED = ("hunter2-Zq9", "bob@example.org")


def run_leaky_job(app: Ratchet, caplog: pytest.LogCaptureFixture) -> tuple[Any, list[JobEvent]]:
    import ops_jobs

    events: list[JobEvent] = []
    app.add_event_listener(events.append)
    handle = app.enqueue(ops_jobs.leaks).with_max_retries(0).submit()
    with caplog.at_level(logging.DEBUG, logger="ratchet"):
        app.worker(concurrency=1).run_due()
    return app.jobs.history(handle.id), events


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock, support_path: object) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["ops_jobs"], clock=clock)
    yield app
    app.close()


def test_no_planted_secret_is_stored_emitted_or_logged(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    history, events = run_leaky_job(app, caplog)
    [attempt] = history.attempts
    assert attempt.error is not None and attempt.traceback is not None
    assert attempt.error.startswith("ConnectionError: cannot reach postgresql://***@db.internal")
    assert "password=***" in attempt.error and "<email>" in attempt.error
    assert 'raise ConnectionError(f"cannot reach {DSN}' in attempt.traceback, "code stays"
    failed = [e for e in events if e.data.get("error")]
    assert failed, "a failure event carries the error"
    texts = [
        history.job.last_error or "",
        attempt.error,
        attempt.traceback,
        *(str(e.data) for e in events),
        caplog.text,
    ]
    for text in texts:
        for secret in PLANTED:
            assert secret not in text


class Stricter:
    """Replaces the built-in sanitiser: redacts the host name too."""

    @hookimpl
    def ratchet_sanitize_error(self, text: str, kind: str, config: Any) -> str | None:
        from ratchet.domain.sanitize import sanitize_text

        return sanitize_text(text, config.sanitize_policy(), traceback=kind == "traceback").replace(
            "db.internal", "<host>"
        )


def test_a_plugin_replaces_the_sanitiser(
    sqlite_url: str, clock: FakeClock, support_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    plugins = Plugins(make_plugin_manager(load_entrypoints=False, extra=[Stricter()]))
    with Ratchet(sqlite_url, allowed_modules=["ops_jobs"], clock=clock, plugins=plugins) as app:
        history, _ = run_leaky_job(app, caplog)
    [attempt] = history.attempts
    assert "<host>" in (attempt.error or "") and "db.internal" not in (attempt.traceback or "")


def test_the_built_in_sanitiser_follows_the_app_settings(
    sqlite_url: str, clock: FakeClock, support_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    with Ratchet(
        sqlite_url, allowed_modules=["ops_jobs"], clock=clock, sanitize_emails=False
    ) as app:
        history, _ = run_leaky_job(app, caplog)
    [attempt] = history.attempts
    assert "bob@example.org" in (attempt.error or "") and "hunter2-Zq9" not in (attempt.error or "")
