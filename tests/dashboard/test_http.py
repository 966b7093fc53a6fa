"""The dashboard over HTTP (Starlette's TestClient) on a real SQLite store: every page, the
filters and paging, masking, the operator actions, and each security rule."""

from __future__ import annotations

import base64
import logging
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from ratchet import JobStatus, Ratchet
from ratchet.testing import FakeClock
from ratchet_dashboard import DashboardConfigError, DashboardSettings, create_dashboard
from ratchet_dashboard.settings import check_bind

LOCAL = ("127.0.0.1", 50123)
REMOTE = ("203.0.113.9", 50123)
TOKEN = "t" * 12 + "-dashboard-token"


@pytest.fixture
def app(sqlite_url: str, support_path: Path) -> Iterator[Ratchet]:
    import dashboard_jobs  # noqa: F401 - the jobs' module must be importable by the worker

    app = Ratchet(sqlite_url, allowed_modules=["dashboard_jobs"])
    yield app
    app.close()


def client_for(app: Ratchet, client: tuple[str, int] = LOCAL, **settings: object) -> TestClient:
    board = create_dashboard(app, settings=DashboardSettings(**settings))  # type: ignore[arg-type]
    return TestClient(board, client=client, follow_redirects=False)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, "the page has no CSRF field"
    return match.group(1)


def run_jobs(app: Ratchet) -> None:
    app.worker(concurrency=1).run_due()


def submit_mix(app: Ratchet) -> dict[str, uuid.UUID]:
    import dashboard_jobs as jobs

    ids = {
        "ok": app.enqueue(jobs.ok, 1).with_tags("eu").submit().id,
        "charge": app.enqueue(jobs.charge, 7, password=jobs.SECRET, note="gift")
        .with_business_key("order-7")
        .submit()
        .id,
        "ship": app.enqueue(jobs.ship, 42).with_max_retries(0).submit().id,
        "logs": app.enqueue(jobs.logs_then_fails, 9).with_max_retries(0).submit().id,
    }
    run_jobs(app)
    ids["pending"] = app.enqueue(jobs.ok, 2).with_tags("us").submit().id
    return ids


# -- pages ----------------------------------------------------------------------------------------


def test_every_page_renders(app: Ratchet) -> None:
    submit_mix(app)
    with client_for(app) as client:
        for path, marker in [
            ("/", "Queue depth"),
            ("/live", "Due now"),
            ("/jobs", "Filter"),
            ("/dlq", "Grouped by error class"),
            ("/recurring", "Recurring jobs"),
            ("/cluster", "Watcher"),
        ]:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text[:300])
            assert marker in response.text, path


def test_overview_shows_counts_and_queue_health(app: Ratchet) -> None:
    submit_mix(app)
    with client_for(app) as client:
        html = client.get("/").text
    assert re.search(r'id="pending">1<', html)  # the one job submitted after the run
    assert re.search(r'id="failed">2<', html)  # ship and logs_then_fails: dead letters
    assert re.search(r'id="minute">2 ok · 2 failed<', html)


def test_the_throughput_chart_starts_with_the_hour_before(app: Ratchet) -> None:
    submit_mix(app)
    with client_for(app) as client:
        client.get("/")
        throughput = client.app.state.dashboard.throughput  # type: ignore[attr-defined]
        assert throughput.history_loaded.wait(timeout=30)
        html = client.get("/live").text
        samples = throughput.samples()
    assert html.count("<polyline") == 2  # succeeded and failed
    # The five-minute buckets of the hour before, oldest first, then the live sample (which
    # stands for the newest bucket: both count the jobs that just ended).
    assert len(samples) == 12
    assert [s.at for s in samples] == sorted(s.at for s in samples)
    assert all((s.succeeded, s.failed) == (0, 0) for s in samples[:-1])
    assert (samples[-1].succeeded, samples[-1].failed) == (2, 2)


def test_jobs_filters_by_status_target_tag_and_business_key(app: Ratchet) -> None:
    ids = submit_mix(app)
    with client_for(app) as client:

        def listed(**params: object) -> set[str]:
            html = client.get("/jobs", params=params).text  # type: ignore[arg-type]
            return set(re.findall(r'href="/jobs/([0-9a-f-]{36})"', html))

        assert listed(status="FAILED") == {str(ids["ship"]), str(ids["logs"])}
        assert listed(status=["PENDING", "SUCCEEDED"]) == {
            str(ids["ok"]),
            str(ids["charge"]),
            str(ids["pending"]),
        }
        assert listed(target="dashboard_jobs:ship") == {str(ids["ship"])}
        assert listed(tag="eu") == {str(ids["ok"])}
        assert listed(business_key="order-7") == {str(ids["charge"])}
        future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
        assert listed(created_after=future) == set()
        assert listed(created_before=future) == {str(i) for i in ids.values()}
        assert listed(finished_before=future, target="dashboard_jobs:ship") == {str(ids["ship"])}
        assert listed(finished_after=future) == set()


def test_jobs_page_through_keyset_cursors(app: Ratchet) -> None:
    import dashboard_jobs as jobs

    submitted = {str(app.enqueue(jobs.ok, n).submit().id) for n in range(7)}
    seen: list[str] = []
    with client_for(app, page_size=3) as client:
        url: str | None = "/jobs"
        pages = 0
        while url is not None:
            html = client.get(url).text
            seen += re.findall(r'<td class="mono"><a href="/jobs/([0-9a-f-]{36})"', html)
            found = re.search(r'<a href="([^"]+)" id="next">', html)
            url = found.group(1).replace("&amp;", "&") if found else None
            pages += 1
    assert pages == 3
    assert len(seen) == 7 and set(seen) == submitted
    assert seen == sorted(seen, reverse=True)  # newest first, none twice


def test_search_by_id_opens_the_job_or_says_why_not(app: Ratchet) -> None:
    ids = submit_mix(app)
    with client_for(app) as client:
        found = client.get("/jobs", params={"id": str(ids["ship"])})
        assert found.status_code == 303
        assert found.headers["location"] == f"/jobs/{ids['ship']}"
        missing = client.get("/jobs", params={"id": str(uuid.uuid4())})
        assert missing.status_code == 400 and "no job" in missing.text
        bad = client.get("/jobs", params={"id": "not-a-uuid"})
        assert bad.status_code == 400 and "is not a job id" in bad.text


def test_bad_filters_get_a_message_not_a_crash(app: Ratchet) -> None:
    with client_for(app) as client:
        status = client.get("/jobs", params={"status": "SLEEPING"})
        assert status.status_code == 400 and "SLEEPING" in status.text
        when = client.get("/jobs", params={"created_after": "yesterday"})
        assert when.status_code == 400 and "is not a date and time" in when.text
        cursor = client.get("/jobs", params={"cursor": "garbage"})
        assert cursor.status_code == 400


def test_job_page_shows_masked_arguments_attempts_traceback_and_log(app: Ratchet) -> None:
    import dashboard_jobs as jobs

    ids = submit_mix(app)
    with client_for(app) as client:
        charge = client.get(f"/jobs/{ids['charge']}").text
        assert "&#34;password&#34;: &#34;***&#34;" in charge
        assert "gift" in charge  # the other arguments are shown
        failed = client.get(f"/jobs/{ids['logs']}").text
        assert re.search(r"#1 INFO packing order 9", failed)  # the job's own log
        assert "Traceback of attempt 1" in failed
        assert "ValueError: order 9 has no address" in failed
        assert 'data-action="retry"' in failed
        shipped = client.get(f"/jobs/{ids['ship']}").text
        assert "carrier API down" in shipped
        unknown = client.get(f"/jobs/{uuid.uuid4()}")
        assert unknown.status_code == 404
        for html in (charge, failed, shipped, client.get("/dlq").text, client.get("/jobs").text):
            assert jobs.SECRET not in html


def test_job_page_shows_dependants_and_batch_children(app: Ratchet) -> None:
    import dashboard_jobs as jobs

    head = app.enqueue(jobs.ok, 100).then(jobs.ok, 101).submit()
    batch = app.enqueue_batch("refunds").for_each([1, 2, 3], jobs.ok).submit()
    with client_for(app) as client:
        html = client.get(f"/jobs/{head.id}").text
        [dependant] = app.jobs.dependants(head.id)
        assert f"/jobs/{dependant.job_id}" in html
        batch_html = client.get(f"/jobs/{batch.id}").text
        children = app.jobs.batch_children(batch.id).items
        assert len(children) == 3
        assert "refunds: 3 children, 0 succeeded, 0 failed or canceled (0.0 % done)" in batch_html
        assert all(f"/jobs/{c.job_id}" in batch_html for c in children)


# -- actions --------------------------------------------------------------------------------------


def test_actions_need_the_sessions_csrf_token(app: Ratchet) -> None:
    ids = submit_mix(app)
    with client_for(app) as client:
        page = client.get(f"/jobs/{ids['pending']}").text
        token = csrf_of(page)
        refused = client.post(f"/jobs/{ids['pending']}/pause", data={})
        assert refused.status_code == 403 and "CSRF" in refused.text
        forged = client.post(f"/jobs/{ids['pending']}/pause", data={"csrf": "0" * 64})
        assert forged.status_code == 403
        assert app.jobs.get(ids["pending"]).status is JobStatus.PENDING
        # Another browser (another session cookie) cannot use this page's token.
        with client_for(app) as other:
            other.get("/")
            assert (
                other.post(f"/jobs/{ids['pending']}/pause", data={"csrf": token}).status_code == 403
            )
        done = client.post(f"/jobs/{ids['pending']}/pause", data={"csrf": token})
        assert done.status_code == 303
    assert app.jobs.get(ids["pending"]).status is JobStatus.PAUSED


def test_actions_are_posts_only(app: Ratchet) -> None:
    ids = submit_mix(app)
    with client_for(app) as client:
        assert client.get(f"/jobs/{ids['pending']}/cancel").status_code == 405
    assert app.jobs.get(ids["pending"]).status is JobStatus.PENDING


def test_pause_resume_cancel_retry_each_write_one_audit_line(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    ids = submit_mix(app)
    caplog.set_level(logging.INFO, logger="ratchet.dashboard.audit")
    with client_for(app) as client:
        token = csrf_of(client.get(f"/jobs/{ids['ship']}").text)
        for job, action, status in [
            ("pending", "pause", JobStatus.PAUSED),
            ("pending", "resume", JobStatus.PENDING),
            ("pending", "cancel", JobStatus.CANCELED),
            ("ship", "retry", JobStatus.PENDING),
        ]:
            response = client.post(f"/jobs/{ids[job]}/{action}", data={"csrf": token})
            assert response.status_code == 303, response.text
            assert app.jobs.get(ids[job]).status is status
        again = client.post(f"/jobs/{ids['pending']}/cancel", data={"csrf": token})
        assert again.status_code == 409
    lines = [r.getMessage() for r in caplog.records if r.name == "ratchet.dashboard.audit"]
    assert lines == [
        f"dashboard action=pause subject=job:{ids['pending']} who=local:127.0.0.1 client=127.0.0.1 outcome=ok",
        f"dashboard action=resume subject=job:{ids['pending']} who=local:127.0.0.1 client=127.0.0.1 outcome=ok",
        f"dashboard action=cancel subject=job:{ids['pending']} who=local:127.0.0.1 client=127.0.0.1 outcome=ok",
        f"dashboard action=retry subject=job:{ids['ship']} who=local:127.0.0.1 client=127.0.0.1 outcome=ok",
        f"dashboard action=cancel subject=job:{ids['pending']} who=local:127.0.0.1 client=127.0.0.1 outcome=refused",
    ]


def test_dlq_groups_and_bulk_replay_asks_for_confirmation(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    import dashboard_jobs as jobs

    for order in range(3):
        app.enqueue(jobs.ship, order).with_max_retries(0).submit()
    app.enqueue(jobs.logs_then_fails, 1).with_max_retries(0).submit()
    run_jobs(app)
    caplog.set_level(logging.INFO, logger="ratchet.dashboard.audit")
    with client_for(app) as client:
        html = client.get("/dlq").text
        rows = re.findall(
            r'<td class="mono">([^<]+)</td><td class="mono">([^<]+)</td><td class="num">(\d+)</td>',
            html,
        )
        assert sorted(rows) == [
            ("ConnectionError", "dashboard_jobs:ship", "3"),
            ("ValueError", "dashboard_jobs:logs_then_fails", "1"),
        ]
        token = csrf_of(html)
        group = {"csrf": token, "error_class": "ConnectionError", "target": "dashboard_jobs:ship"}
        asked = client.post("/dlq/replay", data=group)
        assert asked.status_code == 200
        assert "3 dead letter(s) match" in asked.text
        assert app.dlq.count() == 4  # nothing moved before the confirmation
        done = client.post("/dlq/replay", data={**group, "confirm": "yes"})
        assert done.status_code == 303 and "done=replay%3A3" in done.headers["location"]
        assert app.dlq.count() == 1
        purge = {"csrf": token, "error_class": "ValueError", "target": "", "confirm": "yes"}
        assert client.post("/dlq/purge", data=purge).status_code == 303
        assert app.dlq.count() == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "ratchet.dashboard.audit"]
    assert len(lines) == 2
    assert (
        "action=dlq-replay subject=dlq:error=ConnectionError,target=dashboard_jobs:ship" in lines[0]
    )
    assert lines[0].endswith("outcome=ok count=3")
    assert "action=dlq-purge subject=dlq:error=ValueError,target=*" in lines[1]


def test_dlq_replays_one_job(app: Ratchet) -> None:
    ids = submit_mix(app)
    with client_for(app) as client:
        token = csrf_of(client.get("/dlq").text)
        done = client.post("/dlq/replay", data={"csrf": token, "job_id": str(ids["ship"])})
        assert done.status_code == 303
    assert app.jobs.get(ids["ship"]).status is JobStatus.PENDING


# -- recurring ------------------------------------------------------------------------------------


def test_recurring_page_marks_dst_shifts_and_pauses_a_master(
    sqlite_url: str, support_path: Path
) -> None:
    import dashboard_jobs as jobs

    clock = FakeClock(datetime(2026, 3, 26, 12, 0, tzinfo=UTC))
    app = Ratchet(sqlite_url, allowed_modules=["dashboard_jobs"], clock=clock)
    try:
        handle = app.schedule_recurring("0 30 3 * * ?", "Europe/Berlin", jobs.tick).submit()
        with client_for(app) as client:
            html = client.get("/recurring").text
            fires = re.findall(
                r'<div class="mono( dst)?">([^<]+?)(?: \(UTC offset changes\))?</div>', html
            )
            assert [f[1] for f in fires] == [
                "2026-03-27T03:30:00+01:00",
                "2026-03-28T03:30:00+01:00",
                "2026-03-29T03:30:00+02:00",
                "2026-03-30T03:30:00+02:00",
                "2026-03-31T03:30:00+02:00",
            ]
            assert [bool(f[0]) for f in fires] == [False, False, True, False, False]
            assert "0 30 3 * * ?" in html and "Europe/Berlin" in html
            token = csrf_of(html)
            master = handle.id
            assert (
                client.post(f"/recurring/{master}/pause", data={"csrf": token}).status_code == 303
            )
            record = app.get_recurring(master)
            assert record is not None and record.paused
            assert 'data-action="resume"' in client.get("/recurring").text
    finally:
        app.close()


# -- security -------------------------------------------------------------------------------------


def test_without_auth_only_loopback_clients_get_in(app: Ratchet) -> None:
    with client_for(app, client=REMOTE) as client:
        refused = client.get("/")
        assert refused.status_code == 403
        assert "loopback" in refused.text
    with client_for(app, client=("::1", 1)) as client:
        assert client.get("/").status_code == 200


def test_a_token_lets_in_by_bearer_header_or_login_cookie(app: Ratchet) -> None:
    with client_for(app, client=REMOTE, token=TOKEN) as client:
        assert client.get("/").status_code == 303  # to the login page
        assert client.get("/", headers={"Authorization": "Bearer nope"}).status_code == 303
        assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        login = client.get("/login")
        token = csrf_of(login.text)
        wrong = client.post("/login", data={"csrf": token, "token": "x" * 20})
        assert wrong.status_code == 401
        right = client.post("/login", data={"csrf": token, "token": TOKEN})
        assert right.status_code == 303
        assert client.get("/").status_code == 200  # the login cookie now
        assert TOKEN not in right.headers.get("set-cookie", "")


def test_http_basic_authentication(app: Ratchet) -> None:
    with client_for(app, client=REMOTE, username="ops", password="correct-horse") as client:
        challenge = client.get("/jobs")
        assert challenge.status_code == 401
        assert challenge.headers["www-authenticate"].startswith("Basic ")

        def basic(user: str, password: str) -> dict[str, str]:
            raw = base64.b64encode(f"{user}:{password}".encode()).decode()
            return {"Authorization": f"Basic {raw}"}

        assert client.get("/jobs", headers=basic("ops", "wrong-horse")).status_code == 401
        assert client.get("/jobs", headers=basic("ops", "correct-horse")).status_code == 200


def test_mounted_with_the_host_applications_auth(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    ids = submit_mix(app)

    def who(request: object) -> str | None:
        return getattr(request, "headers", {}).get("x-user")  # type: ignore[no-any-return]

    board = create_dashboard(app, settings=DashboardSettings(host_auth=who))
    host = Starlette(routes=[Mount("/ops/ratchet", board)])
    caplog.set_level(logging.INFO, logger="ratchet.dashboard.audit")
    with TestClient(host, client=REMOTE, follow_redirects=False) as client:
        assert client.get("/ops/ratchet/").status_code == 403
        html = client.get("/ops/ratchet/", headers={"x-user": "alice"}).text
        assert 'href="/ops/ratchet/jobs"' in html  # links stay under the mount point
        token = csrf_of(
            client.get(f"/ops/ratchet/jobs/{ids['pending']}", headers={"x-user": "alice"}).text
        )
        done = client.post(
            f"/ops/ratchet/jobs/{ids['pending']}/cancel",
            data={"csrf": token},
            headers={"x-user": "alice"},
        )
        assert done.headers["location"] == f"/ops/ratchet/jobs/{ids['pending']}"
    [line] = [r.getMessage() for r in caplog.records if r.name == "ratchet.dashboard.audit"]
    assert f"subject=job:{ids['pending']} who=alice client=203.0.113.9 outcome=ok" in line


def test_read_only_hides_and_refuses_actions(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    ids = submit_mix(app)
    caplog.set_level(logging.INFO, logger="ratchet.dashboard.audit")
    with client_for(app, read_only=True) as client:
        for path in (f"/jobs/{ids['ship']}", f"/jobs/{ids['pending']}", "/dlq", "/recurring"):
            assert "data-action=" not in client.get(path).text, path
        token = csrf_of(client.get("/login").text) if False else None
        html = client.get(f"/jobs/{ids['ship']}").text
        assert "read-only" in html
        # A forged form with a valid token is still refused.
        client.get("/")
        session = client.cookies.get("ratchet_dashboard_session")
        from ratchet_dashboard.security import csrf_token

        board_settings = client.app.state.dashboard.settings  # type: ignore[attr-defined]
        token = csrf_token(board_settings, session)
        for path in (f"/jobs/{ids['ship']}/retry", f"/jobs/{ids['pending']}/cancel"):
            refused = client.post(path, data={"csrf": token})
            assert refused.status_code == 403 and "read-only" in refused.text
        replay = client.post("/dlq/replay", data={"csrf": token, "job_id": str(ids["ship"])})
        assert replay.status_code == 403
    assert app.jobs.get(ids["ship"]).status is JobStatus.FAILED
    assert app.jobs.get(ids["pending"]).status is JobStatus.PENDING
    assert not [r for r in caplog.records if r.name == "ratchet.dashboard.audit"]


def test_pages_carry_a_content_security_policy_and_no_store(app: Ratchet) -> None:
    with client_for(app) as client:
        response = client.get("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["cache-control"] == "no-store"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie


def test_binding_beyond_loopback_needs_authentication() -> None:
    open_settings = DashboardSettings()
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_bind(host, open_settings)
    for host in ("0.0.0.0", "::", "192.0.2.10", "dashboard.example"):
        with pytest.raises(DashboardConfigError, match="RATCHET_DASHBOARD_TOKEN"):
            check_bind(host, open_settings)
    check_bind("0.0.0.0", DashboardSettings(token=TOKEN))
    check_bind("0.0.0.0", DashboardSettings(username="ops", password="correct-horse"))


def test_weak_or_incomplete_settings_are_refused() -> None:
    with pytest.raises(DashboardConfigError, match="at least 16 characters"):
        DashboardSettings(token="short")
    with pytest.raises(DashboardConfigError, match="both a user and a password"):
        DashboardSettings.from_env({"RATCHET_DASHBOARD_USER": "ops"})
    with pytest.raises(DashboardConfigError, match="password must be at least 8"):
        DashboardSettings(username="ops", password="pw")
    settings = DashboardSettings.from_env(
        {"RATCHET_DASHBOARD_TOKEN": TOKEN, "RATCHET_DASHBOARD_READ_ONLY": "yes"}
    )
    assert settings.read_only and settings.authenticated
    assert TOKEN not in repr(settings)


def test_create_dashboard_needs_a_ratchet_app() -> None:
    with pytest.raises(TypeError, match=r"needs a ratchet\.Ratchet app"):
        create_dashboard("sqlite:///jobs.db", settings=DashboardSettings())  # type: ignore[arg-type]


def test_cluster_page_shows_limits_and_permits(app: Ratchet) -> None:
    import dashboard_jobs as jobs

    app.register_resource_limit("carrier-api", 3)
    app.register_type_limit(jobs.ship, max_concurrent=2, rate_per_minute=30)
    with client_for(app) as client:
        html = client.get("/cluster").text
    resources = re.search(r'<table id="resources">(.*?)</table>', html, re.DOTALL)
    assert resources and re.search(r"carrier-api</td><td class=\"num\">3<", resources.group(1))
    types = re.search(r'<table id="type-limits">(.*?)</table>', html, re.DOTALL)
    assert (
        types
        and 'dashboard_jobs:ship</td><td class="num">2</td><td class="num">30<' in types.group(1)
    )


def test_cluster_page_shows_the_breakers_each_node_published(app: Ratchet) -> None:
    from ratchet.domain.watcher import NodeInfo

    store: Any = app.store
    now = app.now()
    for node_id, name in (("web-1-a", "web-1"), ("web-2-a", "web-2")):
        store.register_incarnation(NodeInfo(node_id, name, "host", 1, 4), now=now)
    assert store.beat("web-1-a", now=now, breakers={"payments": "OPEN"})
    assert store.beat("web-2-a", now=now, breakers={"mail": "HALF_OPEN"})
    store.register_incarnation(NodeInfo("old-1-a", "old-1", "host", 1, 4), now=now)
    assert store.beat("old-1-a", now=now, breakers={"stale": "OPEN"})
    store.declare_dead(["old-1-a"], now=now)
    with client_for(app) as client:
        html = client.get("/cluster").text
    table = re.search(r'<table id="breakers">(.*?)</table>', html, re.DOTALL)
    assert table
    rows = re.findall(
        r'<tr><td[^>]*>([^<]+)</td><td class="mono">([^<]+)</td><td>.*?>([A-Z_]+)<',
        table.group(1),
    )
    assert ("web-1", "payments", "OPEN") in rows
    assert ("web-2", "mail", "HALF_OPEN") in rows
    assert not any(service == "stale" for _, service, _ in rows), "a dead node's are not shown"


def test_job_page_draws_the_jobs_waiting_on_it_as_a_tree(app: Ratchet) -> None:
    import dashboard_jobs as jobs

    chain = app.enqueue(jobs.ok, 1).then(jobs.ok, 2).then(jobs.ok, 3).submit()
    branches = (
        app.enqueue(jobs.ok, 4).then_on_success(jobs.ok, 5).then_on_failure(jobs.ok, 6).submit()
    )
    with client_for(app) as client:
        labels: dict[str, str] = {}

        def boxes(job_id: uuid.UUID) -> dict[str, int]:
            """Each drawn job's id suffix and the x of its box (170 per level); the branch
            condition in its label goes to ``labels``."""
            html = client.get(f"/jobs/{job_id}").text
            graph = re.search(r'<div id="graph">(.*?)</div>', html, re.DOTALL)
            assert graph, "no graph"
            found = re.findall(
                r'<rect x="(\d+)"[^>]*/><text[^>]*>ok ([0-9a-f]{6})(?: \((on [A-Z_]+)\))?<',
                graph.group(1),
            )
            assert graph.group(1).count('class="edge"') == len(found) - 1
            labels.update({suffix: condition for _, suffix, condition in found})
            return {suffix: int(x) for x, suffix, _ in found}

        step2, step3 = app.jobs.dependants(chain.id)
        assert boxes(chain.id) == {
            str(chain.id)[-6:]: 0,
            str(step2.job_id)[-6:]: 170,
            str(step3.job_id)[-6:]: 340,  # waits on step 2, not on the head
        }
        on_ok, on_failure = app.jobs.dependants(branches.id)
        assert boxes(branches.id) == {
            str(branches.id)[-6:]: 0,
            str(on_ok.job_id)[-6:]: 170,
            str(on_failure.job_id)[-6:]: 170,  # both branches wait on the head
        }
        assert labels[str(on_ok.job_id)[-6:]] == "on SUCCESS"
        assert labels[str(on_failure.job_id)[-6:]] == "on FAILURE"
        assert labels[str(step2.job_id)[-6:]] == "", "a chain step has no condition"
        branch_page = client.get(f"/jobs/{on_failure.job_id}").text
        assert f'Waits for <a href="/jobs/{branches.id}">{branches.id}</a>: runs on FAILURE' in (
            branch_page
        )
        step_page = client.get(f"/jobs/{step3.job_id}").text
        assert f"{step2.job_id}</a>: runs when it succeeds" in step_page
        assert "This job waits for no other job." in client.get(f"/jobs/{chain.id}").text


def test_job_text_is_escaped_on_every_page(app: Ratchet) -> None:
    import dashboard_jobs as jobs

    handle = (
        app.enqueue(jobs.charge, 1, note="<script>alert('x')</script>")
        .with_business_key("<img src=x onerror=alert(1)>")
        .submit()
    )
    with client_for(app) as client:
        pages = [
            client.get(f"/jobs/{handle.id}").text,
            client.get("/jobs", params={"business_key": "<img src=x onerror=alert(1)>"}).text,
        ]
    for html in pages:
        assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert" in pages[0]
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[1]
