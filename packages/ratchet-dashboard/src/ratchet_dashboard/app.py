"""The dashboard's ASGI application: :func:`create_dashboard`."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ratchet import Ratchet
from ratchet.domain.errors import JobNotFound, RatchetError
from ratchet_dashboard import security, views
from ratchet_dashboard.charts import Throughput
from ratchet_dashboard.settings import DashboardSettings

log = logging.getLogger("ratchet.dashboard")

HERE = Path(__file__).parent
#: Largest form body accepted (the forms hold a few short fields).
MAX_FORM = 64 * 1024
#: The headers of every page: no framing, no inline script, nothing cached.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
JOB_ACTIONS = {"retry", "cancel", "pause", "resume"}
RECURRING_ACTIONS = {"pause", "resume", "cancel"}

Handler = Callable[[Request, "Page"], Response]


class Page:
    """One request's context: who makes it, its session, the settings and the app."""

    def __init__(self, dashboard: Dashboard, request: Request, who: str, session: str) -> None:
        self.dashboard = dashboard
        self.request = request
        self.who = who
        self.session = session
        self.form: dict[str, list[str]] = {}

    @property
    def app(self) -> Ratchet:
        return self.dashboard.app

    def field(self, name: str) -> str:
        values = self.form.get(name) or [""]
        return values[0]

    def url(self, path: str, **params: Any) -> str:
        """``path`` under the dashboard's mount point, with query ``params`` (empty ones left out)."""
        base = self.request.scope.get("root_path", "").rstrip("/")
        query = urlencode(
            [(k, v) for k, v in params.items() if v not in (None, "", [])], doseq=True
        )
        return f"{base}{path}" + (f"?{query}" if query else "")

    def render(self, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        settings = self.dashboard.settings
        html = self.dashboard.env.get_template(template).render(
            page=self,
            url=self.url,
            csrf=security.csrf_token(settings, self.session),
            read_only=settings.read_only,
            who=self.who,
            refresh_ms=int(settings.refresh_seconds * 1000),
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    def client(self) -> str:
        return self.request.client.host if self.request.client else "-"


class Dashboard:
    """The state shared by the dashboard's requests."""

    def __init__(self, app: Ratchet, settings: DashboardSettings) -> None:
        self.app = app
        self.settings = settings
        self.throughput = Throughput()
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True),
            undefined=StrictUndefined,  # a misspelt field fails loudly instead of showing nothing
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["age"] = lambda then, now: views.age(now, then)
        self.env.filters["when"] = lambda t: (
            "-" if t is None else t.strftime("%Y-%m-%d %H:%M:%S %Z")
        )
        self.env.globals["Markup"] = Markup

    def endpoint(
        self, handler: Handler, *, action: bool = False, public: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` behind authentication, the session cookie, CSRF and read-only checks."""
        settings = self.settings

        async def run(request: Request) -> Response:
            # Off the event loop: a host application's check may be blocking (Django's
            # session store, for one).
            who = (
                "anonymous"
                if public
                else await run_in_threadpool(security.identify, settings, request)
            )
            if who is None:
                page_url = request.scope.get("root_path", "").rstrip("/") + "/login"
                return self._finish(security.refusal(settings, request, page_url), None)
            session = request.cookies.get(security.SESSION_COOKIE)
            new_session = None
            if not session:
                session = new_session = security.new_session()
            page = Page(self, request, who, session)
            if request.method == "POST":
                body = await request.body()
                if len(body) > MAX_FORM:
                    return self._finish(Response("form too large", status_code=413), new_session)
                page.form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
                sent = page.field(security.CSRF_FIELD)
                if not security.csrf_valid(
                    settings, request.cookies.get(security.SESSION_COOKIE), sent
                ):
                    return self._finish(
                        Response(
                            "the form's CSRF token is missing or wrong: reload the page and try again",
                            status_code=403,
                        ),
                        new_session,
                    )
                if action and settings.read_only:
                    return self._finish(
                        Response("the dashboard is read-only", status_code=403), new_session
                    )
            try:
                response = await run_in_threadpool(handler, request, page)
            except views.BadRequest as exc:
                response = page.render("error.html", 400, message=str(exc))
            except RatchetError as exc:
                response = page.render("error.html", 409, message=str(exc))
            return self._finish(response, new_session, request)

        return run

    def _finish(
        self, response: Response, new_session: str | None, request: Request | None = None
    ) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if new_session is not None:
            path = (request.scope.get("root_path", "") if request else "") or "/"
            response.set_cookie(
                security.SESSION_COOKIE,
                new_session,
                httponly=True,
                samesite="strict",
                path=path,
                secure=bool(request and request.url.scheme == "https"),
            )
        return response


# -- pages -------------------------------------------------------------------------------------


def overview(request: Request, page: Page) -> Response:
    return page.render("overview.html", **views.overview(page.app, page.dashboard.throughput))


def overview_live(request: Request, page: Page) -> Response:
    return page.render("overview_live.html", **views.overview(page.app, page.dashboard.throughput))


def jobs(request: Request, page: Page) -> Response:
    params = request.query_params
    wanted = params.get("id", "").strip()
    if wanted:
        job_id = views.parse_id(wanted)
        try:
            page.app.jobs.get(job_id)
        except JobNotFound:
            raise views.BadRequest(f"no job {job_id}") from None
        return RedirectResponse(page.url(f"/jobs/{job_id}"), status_code=303)
    query, form = views.parse_job_filters(params, params.getlist("status"))
    cursor = params.get("cursor") or None
    limit = page.dashboard.settings.page_size
    found = views.jobs_page(page.app, query, cursor, limit)
    next_url = (
        page.url("/jobs", **{**form, "cursor": found["next_cursor"]})
        if found["next_cursor"]
        else None
    )
    return page.render(
        "jobs.html",
        form=form,
        statuses=views.ALL_STATUSES,
        next_url=next_url,
        first_url=page.url("/jobs", **form) if cursor else None,
        **found,
    )


def job(request: Request, page: Page) -> Response:
    job_id = views.parse_id(request.path_params["job_id"])
    found = views.job_page(page.app, job_id, page.url)
    if found is None:
        return page.render("error.html", 404, message=f"no job {job_id}")
    return page.render("job.html", **found)


def job_action(request: Request, page: Page) -> Response:
    job_id = views.parse_id(request.path_params["job_id"])
    name = request.path_params["action"]
    if name not in JOB_ACTIONS:
        return page.render("error.html", 404, message=f"no action {name!r}")
    app = page.app
    method = {
        "retry": app.retry_job,
        "cancel": app.cancel_job,
        "pause": app.pause_job,
        "resume": app.resume_job,
    }[name]
    done = method(job_id)
    security.audit(page.who, name, f"job:{job_id}", "ok" if done else "refused", page.client())
    if not done:
        return page.render(
            "error.html", 409, message=f"job {job_id} cannot be {name}d in its status now"
        )
    return RedirectResponse(page.url(f"/jobs/{job_id}"), status_code=303)


def dlq(request: Request, page: Page) -> Response:
    return page.render("dlq.html", **views.dlq_page(page.app))


def dlq_bulk(request: Request, page: Page) -> Response:
    verb = request.path_params["verb"]
    if verb not in ("replay", "purge"):
        return page.render("error.html", 404, message=f"no action {verb!r}")
    app = page.app
    job_id = page.field("job_id")
    if job_id and verb == "replay":
        ident = views.parse_id(job_id)
        done = app.dlq.replay(ident)
        security.audit(
            page.who, "dlq-replay", f"job:{ident}", "ok" if done else "refused", page.client()
        )
        if not done:
            return page.render("error.html", 409, message=f"job {ident} is not a dead letter")
        return RedirectResponse(page.url(f"/jobs/{ident}"), status_code=303)
    error, target = page.field("error_class"), page.field("target")
    flt = views.dlq_filter(error, target)
    subject = f"dlq:error={error or '*'},target={target or '*'}"
    if page.field("confirm") != "yes":
        matching = app.dlq.purge(flt, dry_run=True)
        return page.render(
            "confirm.html", verb=verb, error_class=error, target=target, matching=matching
        )
    count = app.dlq.replay_matching(flt, limit=1000) if verb == "replay" else app.dlq.purge(flt)
    security.audit(page.who, f"dlq-{verb}", subject, f"ok count={count}", page.client())
    return RedirectResponse(page.url("/dlq", done=f"{verb}:{count}"), status_code=303)


def recurring(request: Request, page: Page) -> Response:
    return page.render("recurring.html", **views.recurring_page(page.app))


def recurring_action(request: Request, page: Page) -> Response:
    name = request.path_params["action"]
    if name not in RECURRING_ACTIONS:
        return page.render("error.html", 404, message=f"no action {name!r}")
    master = views.parse_id(request.path_params["master_id"])
    app = page.app
    method = {
        "pause": app.pause_recurring,
        "resume": app.resume_recurring,
        "cancel": app.cancel_recurring,
    }[name]
    done = method(master)
    security.audit(
        page.who,
        f"recurring-{name}",
        f"recurring:{master}",
        "ok" if done else "refused",
        page.client(),
    )
    if not done:
        return page.render(
            "error.html", 409, message=f"recurring job {master} cannot be {name}d now"
        )
    return RedirectResponse(page.url("/recurring"), status_code=303)


def cluster(request: Request, page: Page) -> Response:
    return page.render("cluster.html", **views.cluster_page(page.app))


def login(request: Request, page: Page) -> Response:
    settings = page.dashboard.settings
    if settings.token is None:
        return RedirectResponse(page.url("/"), status_code=303)
    if request.method == "GET":
        return page.render("login.html", failed=False)
    sent = page.field("token")
    if hmac.compare_digest(sent.encode(), settings.token.encode()):
        response = RedirectResponse(page.url("/"), status_code=303)
        response.set_cookie(
            security.LOGIN_COOKIE,
            security.login_cookie_value(settings),
            httponly=True,
            samesite="strict",
            path=request.scope.get("root_path", "") or "/",
            secure=request.url.scheme == "https",
        )
        log.info("dashboard login from %s", page.client())
        return response
    log.warning("dashboard login refused from %s", page.client())
    return page.render("login.html", 401, failed=True)


def create_dashboard(app: Ratchet, *, settings: DashboardSettings | None = None) -> Starlette:
    """The dashboard of ``app`` as an ASGI application, to serve alone or mount in another.

    ``settings`` default to :meth:`DashboardSettings.from_env` (no authentication when the
    environment sets none: the dashboard then answers loopback clients only).
    """
    if not isinstance(app, Ratchet):
        raise TypeError(f"create_dashboard needs a ratchet.Ratchet app, got {type(app).__name__}")
    board = Dashboard(app, settings if settings is not None else DashboardSettings.from_env())
    e = board.endpoint
    routes = [
        Route("/", e(overview)),
        Route("/live", e(overview_live)),
        Route("/jobs", e(jobs)),
        Route("/jobs/{job_id}", e(job)),
        Route("/jobs/{job_id}/{action}", e(job_action, action=True), methods=["POST"]),
        Route("/dlq", e(dlq)),
        Route("/dlq/{verb}", e(dlq_bulk, action=True), methods=["POST"]),
        Route("/recurring", e(recurring)),
        Route(
            "/recurring/{master_id}/{action}", e(recurring_action, action=True), methods=["POST"]
        ),
        Route("/cluster", e(cluster)),
        Route("/login", e(login, public=True), methods=["GET", "POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    dashboard = Starlette(routes=routes)
    dashboard.state.dashboard = board
    return dashboard
