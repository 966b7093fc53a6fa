"""An app with ``@app.recurring`` declarations for worker subprocesses.

``RATCHET_TEST_URL`` is the database; ``RATCHET_TEST_RECURRING`` picks the declarations (``v1``:
``tick`` every second and ``hourly``; ``v2``: ``tick`` every five seconds, ``hourly`` removed;
``none``: no declaration); ``RATCHET_TEST_EFFECTS`` is an SQLite file where ``tick`` records
its fire time and process id.
"""

from __future__ import annotations

import os
import sqlite3

from ratchet import JobContext, JobPriority, Ratchet
from ratchet.domain.recurring import FIRE_TIME_PARAM

app = Ratchet(os.environ["RATCHET_TEST_URL"], allowed_modules=["recurring_app"])
VARIANT = os.environ.get("RATCHET_TEST_RECURRING", "v1")
EFFECTS = os.environ.get("RATCHET_TEST_EFFECTS")


def _record(token: str) -> None:
    if not EFFECTS:
        return
    conn = sqlite3.connect(EFFECTS, timeout=30)
    try:
        with conn:
            conn.execute("INSERT INTO side_effect(token, pid) VALUES (?, ?)", (token, os.getpid()))
    finally:
        conn.close()


if VARIANT in ("v1", "v2"):

    @app.recurring(
        "* * * * * ?" if VARIANT == "v1" else "*/5 * * * * ?",
        id="tick",
        name="Tick",
        priority=JobPriority.CRITICAL,
        max_retries=0,
        tags=("clock",),
    )
    def tick(ctx: JobContext) -> None:
        _record(ctx.param(FIRE_TIME_PARAM) or "?")


if VARIANT == "v1":

    @app.recurring("0 0 * * * ?", zone="Europe/London")
    def hourly() -> None:
        _record("hourly")
