"""The API. ``uvicorn app.main:api`` serves it on ``FASTAPI_APP_DATABASE_URL`` (default: a SQLite
file) with a worker in the same process; ``RUN_WORKER=0`` leaves the jobs to ``ratchet worker
app.worker:ratchet_app`` processes."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from sqlalchemy.orm import Session

from app import services
from app.jobs import send_welcome
from app.models import Base, User
from ratchet import Ratchet
from ratchet.config import WorkerConfig
from ratchet.integrations.fastapi import ratchet_app, session_jobs
from ratchet.integrations.sessions import SessionJobs
from ratchet.integrations.starlette import ratchet_lifespan

DEFAULT_URL = "sqlite:///fastapi_app.sqlite3"


def make_ratchet(url: str) -> Ratchet:
    """The Ratchet app on the application's own database (its tables migrated on start)."""
    return Ratchet(url, allowed_modules=["app."], auto_migrate=True)


def get_session(request: Request) -> Iterator[Session]:
    """One session and transaction per request: committed when the endpoint returns, rolled
    back when it raises."""
    with Session(request.app.state.engine) as session, session.begin():
        yield session


DbSession = Annotated[Session, Depends(get_session)]
Jobs = Annotated[SessionJobs, Depends(session_jobs(get_session))]
App = Annotated[Ratchet, Depends(ratchet_app)]


def create_api(url: str, *, worker: bool | WorkerConfig = True) -> FastAPI:
    """The API on database ``url``; ``worker``: run a worker in this process."""
    opened = ratchet_lifespan(lambda: make_ratchet(url), worker=worker)

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[dict[str, Any]]:
        api.state.engine = services.engine_for(url)
        Base.metadata.create_all(api.state.engine)
        async with opened(api) as state:  # the Ratchet app (and worker) for the app's life
            yield state

    api = FastAPI(lifespan=lifespan)

    @api.post("/users", status_code=201)
    def create_user(
        name: str, session: DbSession, jobs: Jobs, fail: bool = False
    ) -> dict[str, Any]:
        user = User(name=name)
        session.add(user)
        session.flush()
        job = jobs.enqueue(send_welcome, url, user.id, name)
        if fail:  # the user and the job roll back together
            raise HTTPException(status_code=409, detail=f"refused {name}")
        return {"user": user.id, "job": str(job.id)}

    @api.get("/users/{user_id}")
    def get_user(user_id: int, session: DbSession) -> dict[str, Any]:
        user = session.get(User, user_id)
        if user is None:
            raise HTTPException(status_code=404)
        return {"user": user.id, "name": user.name, "welcomed": user.welcomed}

    @api.get("/jobs/{job_id}")
    def get_job(job_id: uuid.UUID, app: App) -> dict[str, Any]:
        record = app.get_job(job_id)
        if record is None:
            raise HTTPException(status_code=404)
        return {"status": record.status.value, "result": record.result}

    return api


api = create_api(
    os.environ.get("FASTAPI_APP_DATABASE_URL", DEFAULT_URL),
    worker=os.environ.get("RUN_WORKER", "1") == "1",
)
