"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright (never a
downloaded browser), against a real worker on a throwaway PostgreSQL database.

One scenario, in the order an operator would go: every page loads (and, with
``RATCHET_DASHBOARD_SCREENSHOTS=DIR``, is photographed into DIR); the jobs are filtered; a failed
job shows its traceback; replayed from the dead-letter queue it succeeds on the worker; a
recurring master is paused. The browser is the plugin's ``chromium_browser``, the ``chromium``
backend: with it required (``RATCHET_REQUIRE_BACKENDS``, as in CI) a missing browser fails the
test instead of skipping it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ratchet import JobStatus, Ratchet
from ratchet.testing import assert_eventually
from ratchet_dashboard import DashboardSettings, create_dashboard

pytestmark = [pytest.mark.postgres, pytest.mark.chromium]
#: Every wait of the scenario ends by this many seconds (the whole test stays well under a minute).
WAIT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """The dashboard on a real HTTP server (uvicorn) in a thread."""

    def __init__(self, app: Ratchet, settings: DashboardSettings) -> None:
        import uvicorn

        self.port = free_port()
        config = uvicorn.Config(
            create_dashboard(app, settings=settings),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="dashboard", daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + WAIT
        while not self.server.started:
            assert time.monotonic() < deadline, "the dashboard did not start"
            assert self.thread.is_alive(), "the dashboard's server stopped"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=WAIT)


def wait_until(check: Any, what: str) -> None:
    assert_eventually(check, WAIT, what, interval=0.05)


def test_an_operator_session_in_chromium(
    chromium_browser: Any, postgres_store_url: str, support_path: Path, tmp_path: Path
) -> None:
    import dashboard_jobs as jobs

    shots = os.environ.get("RATCHET_DASHBOARD_SCREENSHOTS")
    marker = tmp_path / "label-1001"
    app = Ratchet(postgres_store_url, allowed_modules=["dashboard_jobs"])
    worker = app.worker(
        concurrency=2, min_delay=timedelta(milliseconds=20), max_delay=timedelta(milliseconds=100)
    )
    try:
        for order in range(12):
            app.enqueue(jobs.ok, order).with_tags("eu" if order % 2 else "us").submit()
        app.enqueue(jobs.charge, 7, password=jobs.SECRET, note="gift").submit()
        for order in (3, 4):
            app.enqueue(jobs.ship, order).with_max_retries(0).submit()
        failing = app.enqueue(jobs.fails_until, str(marker)).with_max_retries(0).submit()
        nightly = (
            app.schedule_recurring("0 30 2 * * ?", "Europe/Berlin", jobs.tick)
            .with_name("nightly-report")
            .submit()
        )
        # Monthly at 03:00 in Berlin: the April fire comes after the switch to summer time.
        app.schedule_recurring("0 0 3 1 * ?", "Europe/Berlin", jobs.tick).with_name(
            "monthly-invoices"
        ).submit()
        app.register_resource_limit("carrier-api", 2)
        worker.start()
        wait_until(lambda: failing.status() is JobStatus.FAILED, "the failing job failed")
        wait_until(lambda: app.jobs.health().pending == 0, "the other jobs ran")

        settings = DashboardSettings(refresh_seconds=0.5)
        with Served(app, settings) as base:
            page = chromium_browser.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on(
                "console",
                lambda msg: errors.append(msg.text) if msg.type == "error" else None,
            )

            def shoot(name: str) -> None:
                if shots:
                    Path(shots).mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)

            # Every page loads.
            for path, heading in [
                ("/", "Overview"),
                ("/jobs", "Jobs"),
                ("/dlq", "Dead-letter queue"),
                ("/recurring", "Recurring jobs"),
                ("/cluster", "Cluster"),
            ]:
                response = page.goto(base + path)
                assert response is not None and response.status == 200, path
                assert page.inner_text("h1").startswith(heading), path

            # The overview refreshes itself (the script runs under the page's CSP).
            page.goto(base + "/")
            page.wait_for_selector("#live[data-updated]", timeout=WAIT * 1000)
            assert page.inner_text("#pending") == "0"
            shoot("overview")

            # Filter the jobs: the dead letters only, then by tag.
            page.goto(base + "/jobs")
            shoot("jobs")
            page.select_option("select[name=status]", ["FAILED"])
            page.click("#filters button[type=submit]")
            page.wait_for_url("**/jobs?status=FAILED*")
            listed = page.locator("#jobs td.mono a").all_inner_texts()
            assert len(listed) == 3 and str(failing.id) in listed
            page.goto(base + "/jobs")
            page.fill("input[name=tag]", "eu")
            page.click("#filters button[type=submit]")
            assert len(page.locator("#jobs td.mono a").all_inner_texts()) == 6

            # Open the failed job and read its traceback.
            page.goto(base + "/jobs?status=FAILED")
            page.click(f"text={failing.id}")
            page.wait_for_url(f"**/jobs/{failing.id}")
            traceback = page.inner_text(".traceback-text")
            assert "Traceback" in traceback
            assert "RuntimeError: the shipping label for label-1001 is missing" in traceback
            shoot("job")

            # The masked arguments of another job: no secret on the page.
            page.goto(base + "/jobs?target=dashboard_jobs:charge")
            page.click("#jobs td.mono a")
            assert '"password": "***"' in page.inner_text("#payload")
            assert jobs.SECRET not in page.content()

            # Replay it from the DLQ and watch it succeed on the worker.
            marker.write_text("printed")
            page.goto(base + "/dlq")
            shoot("dlq")
            row = page.locator("#dead-letters tr", has_text=str(failing.id))
            row.locator("button[data-action=replay]").click()
            page.wait_for_url(f"**/jobs/{failing.id}")

            def succeeded_on_the_page() -> bool:
                page.reload()
                return bool(page.inner_text("h1 .status") == "SUCCEEDED")

            wait_until(succeeded_on_the_page, "the replayed job shows SUCCEEDED")
            assert failing.status() is JobStatus.SUCCEEDED

            # Pause the recurring master.
            page.goto(base + "/recurring")
            shoot("recurring")
            master = page.locator(f"tr[data-master='{nightly.id}']")
            assert "nightly-report" in master.inner_text()
            master.locator("button[data-action=pause]").click()
            page.wait_for_url("**/recurring")
            assert master.locator("td.state").inner_text() == "PAUSED"
            record = app.get_recurring(nightly.id)
            assert record is not None and record.paused

            # The cluster shows the worker's node.
            page.goto(base + "/cluster")
            assert worker.node_id in page.inner_text("#nodes")
            assert "carrier-api" in page.inner_text("#resources")
            assert "dashboard_jobs.ship" in page.inner_text("#breakers")  # this process's
            shoot("cluster")
            assert errors == []
            page.close()
    finally:
        worker.stop()
        app.close()
