"""How a dashboard authenticates and what it allows, from code or the environment."""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ratchet.domain.errors import ConfigurationError

if TYPE_CHECKING:
    from starlette.requests import Request

TOKEN_ENV = "RATCHET_DASHBOARD_TOKEN"
USER_ENV = "RATCHET_DASHBOARD_USER"
PASSWORD_ENV = "RATCHET_DASHBOARD_PASSWORD"
READ_ONLY_ENV = "RATCHET_DASHBOARD_READ_ONLY"
#: A token shorter than this is refused: it would be guessable.
MIN_TOKEN_LENGTH = 16

HostAuth = Callable[["Request"], "str | None"]
"""Names the user of a request the host application authenticated (None: refuse it)."""


class DashboardConfigError(ConfigurationError):
    """The dashboard's settings are incomplete or unsafe; the message says what to change."""


@dataclass(frozen=True)
class DashboardSettings:
    """Authentication and behaviour of one dashboard.

    With neither ``token``, ``username``/``password`` nor ``host_auth`` the dashboard has no
    authentication: it then answers only clients on the loopback interface, and
    ``ratchet dashboard`` refuses to listen on any other address.

    :param read_only: show everything, offer and accept no action.
    :param token: a bearer token (``Authorization: Bearer ...``, or typed once into the login
        page, which sets a cookie derived from it).
    :param username: with ``password``: HTTP basic authentication.
    :param host_auth: when mounted in an application that authenticates its users itself: a
        function of the request that returns the user's name, or None to refuse the request.
    :param secret: the key that signs CSRF tokens and login cookies (random per process when
        not given; give one when several processes serve the same dashboard).
    :param refresh_seconds: how often the overview page refreshes its figures.
    """

    read_only: bool = False
    token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    host_auth: HostAuth | None = None
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    refresh_seconds: float = 5.0
    page_size: int = 50

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < MIN_TOKEN_LENGTH:
            raise DashboardConfigError(
                f"the dashboard token must be at least {MIN_TOKEN_LENGTH} characters (got "
                f"{len(self.token)}); generate one with "
                "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        if (self.username is None) != (self.password is None) or self.username == "":
            raise DashboardConfigError(
                f"HTTP basic authentication needs both a user and a password ({USER_ENV} and "
                f"{PASSWORD_ENV}); give both or neither"
            )
        if self.password is not None and len(self.password) < 8:
            raise DashboardConfigError("the dashboard password must be at least 8 characters")
        if len(self.secret) < 16:
            raise DashboardConfigError("the dashboard secret must be at least 16 bytes")
        if not 0.5 <= self.refresh_seconds <= 3600:
            raise DashboardConfigError(
                f"refresh_seconds must be within 0.5..3600, got {self.refresh_seconds!r}"
            )
        if not 1 <= self.page_size <= 1000:
            raise DashboardConfigError(f"page_size must be within 1..1000, got {self.page_size}")

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> DashboardSettings:
        """Settings from ``RATCHET_DASHBOARD_TOKEN``, ``RATCHET_DASHBOARD_USER`` and
        ``RATCHET_DASHBOARD_PASSWORD`` and ``RATCHET_DASHBOARD_READ_ONLY`` (``overrides`` win).

        :raises DashboardConfigError: an incomplete or too weak setting.
        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {
            "token": env.get(TOKEN_ENV) or None,
            "username": env.get(USER_ENV) or None,
            "password": env.get(PASSWORD_ENV) or None,
            "read_only": env.get(READ_ONLY_ENV, "").strip().lower() in {"1", "true", "yes", "on"},
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    @property
    def authenticated(self) -> bool:
        """Whether requests must prove who they are (any authentication configured)."""
        return bool(self.token or self.username or self.host_auth)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is on the loopback interface only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, settings: DashboardSettings) -> None:
    """Refuse to listen on ``host`` when it is reachable from other machines and the dashboard
    has no authentication.

    :raises DashboardConfigError: saying how to configure authentication.
    """
    if is_loopback(host) or settings.authenticated:
        return
    raise DashboardConfigError(
        f"refusing to listen on {host} without authentication: anyone who reaches it could "
        f"operate your jobs; set {TOKEN_ENV} (a token of {MIN_TOKEN_LENGTH}+ characters) or "
        f"{USER_ENV} and {PASSWORD_ENV}, or listen on 127.0.0.1"
    )
