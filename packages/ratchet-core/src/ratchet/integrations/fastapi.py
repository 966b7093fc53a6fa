"""FastAPI dependencies: the Ratchet app of :func:`~ratchet.integrations.starlette.ratchet_lifespan`
and :class:`~ratchet.integrations.sessions.SessionJobs` bound to the request's session.

    Jobs = Annotated[SessionJobs, Depends(session_jobs(get_session))]

    @api.post("/users")
    def create_user(name: str, session: DbSession, jobs: Jobs) -> dict[str, int]:
        ...
        jobs.enqueue(send_welcome, user.id)  # commits or rolls back with the session
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from ratchet.engine.app import Ratchet
from ratchet.integrations.sessions import SessionJobs
from ratchet.integrations.starlette import get_ratchet

__all__ = ["SessionJobs", "ratchet_app", "session_jobs"]


def ratchet_app(request: Request) -> Ratchet:
    """Dependency: the app opened by the lifespan."""
    return get_ratchet(request)


def session_jobs(get_session: Callable[..., Any]) -> Callable[..., SessionJobs]:
    """A dependency giving :class:`SessionJobs` on the session that ``get_session`` (your own
    session dependency, typically ``with Session(engine) as s, s.begin(): yield s``) yields.
    FastAPI caches dependencies per request, so the endpoint and the jobs share that session."""

    def dependency(
        app: Ratchet = Depends(ratchet_app),  # noqa: B008
        session: Session = Depends(get_session),  # noqa: B008
    ) -> SessionJobs:
        return SessionJobs(app, session)

    return dependency
