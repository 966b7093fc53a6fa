"""Authentication, CSRF tokens and the audit log of the dashboard's actions."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from typing import TYPE_CHECKING

from starlette.responses import PlainTextResponse, RedirectResponse, Response

from ratchet_dashboard.settings import DashboardSettings, is_loopback

if TYPE_CHECKING:
    from starlette.requests import Request

#: One line per operator action: who did what to which job.
audit_log = logging.getLogger("ratchet.dashboard.audit")

SESSION_COOKIE = "ratchet_dashboard_session"
LOGIN_COOKIE = "ratchet_dashboard_login"
CSRF_FIELD = "csrf"


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def login_cookie_value(settings: DashboardSettings) -> str:
    """The login cookie for the configured token (it changes when the token changes)."""
    assert settings.token is not None
    return _sign(settings.secret, "login:" + _sign(settings.token.encode(), "dashboard"))


def csrf_token(settings: DashboardSettings, session: str) -> str:
    """The form token of a browser session (its session cookie signed with the secret)."""
    return _sign(settings.secret, "csrf:" + session)


def new_session() -> str:
    return secrets.token_urlsafe(24)


def csrf_valid(settings: DashboardSettings, session: str | None, sent: str | None) -> bool:
    """Whether ``sent`` is the form token of ``session`` (both must be present)."""
    if not session or not sent:
        return False
    return hmac.compare_digest(csrf_token(settings, session), sent)


def _basic_user(settings: DashboardSettings, header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or settings.username is None or settings.password is None:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    ok_user = hmac.compare_digest(user.encode(), settings.username.encode())
    ok_password = hmac.compare_digest(password.encode(), settings.password.encode())
    return user if sep and ok_user and ok_password else None


def _bearer_ok(settings: DashboardSettings, header: str) -> bool:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or settings.token is None:
        return False
    return hmac.compare_digest(value.strip().encode(), settings.token.encode())


def identify(settings: DashboardSettings, request: Request) -> str | None:
    """Who makes ``request`` (a name for the audit log), or None when it is not allowed in."""
    if settings.host_auth is not None:
        who = settings.host_auth(request)
        if who:
            return str(who)
    header = request.headers.get("authorization", "")
    if settings.token is not None:
        if _bearer_ok(settings, header):
            return "token"
        cookie = request.cookies.get(LOGIN_COOKIE)
        if cookie and hmac.compare_digest(cookie, login_cookie_value(settings)):
            return "token"
    if settings.username is not None:
        user = _basic_user(settings, header)
        if user is not None:
            return user
    if not settings.authenticated:
        client = request.client.host if request.client else ""
        if is_loopback(client):
            return f"local:{client}"
    return None


def refusal(settings: DashboardSettings, request: Request, login_url: str) -> Response:
    """The answer to a request :func:`identify` did not let in."""
    if not settings.authenticated:
        return PlainTextResponse(
            "the dashboard has no authentication configured and answers loopback clients only",
            status_code=403,
        )
    if settings.token is not None and request.method == "GET" and settings.username is None:
        return RedirectResponse(login_url, status_code=303)
    if settings.username is not None:
        return PlainTextResponse(
            "authentication required",
            status_code=401,
            headers={"WWW-Authenticate": 'Basic realm="ratchet dashboard", charset="UTF-8"'},
        )
    return PlainTextResponse("authentication required", status_code=401 if settings.token else 403)


def audit(who: str, action: str, subject: str, outcome: str, client: str) -> None:
    """Write the one audit line of an action."""
    audit_log.info(
        "dashboard action=%s subject=%s who=%s client=%s outcome=%s",
        action,
        subject,
        who,
        client,
        outcome,
    )
