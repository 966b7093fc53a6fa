"""examples/fastapi_app on SQLite and a real PostgreSQL: a request enqueues a job in its
session's transaction and the in-process worker runs the async target; a failing request leaves
neither its row nor its job; the lifespan opens the app (and the worker) and closes them."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ratchet import JobStatus, Ratchet
from ratchet.config import WorkerConfig
from ratchet.integrations.starlette import ratchet_lifespan
from ratchet.testing import assert_eventually

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app"
FAST = WorkerConfig(
    min_delay=__import__("datetime").timedelta(milliseconds=50),
    burst_delay=__import__("datetime").timedelta(milliseconds=20),
)


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The example's ``app.main`` module, imported from its directory."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    for name in [m for m in sys.modules if m == "app" or m.startswith("app.")]:
        monkeypatch.delitem(sys.modules, name)
    import app.main

    yield app.main


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'api.sqlite3'}"
    return str(request.getfixturevalue("postgres_store_url"))


def poll(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    assert_eventually(predicate, timeout, interval=0.02)


def test_a_request_enqueues_in_its_transaction_and_the_worker_runs_it(
    example: Any, database_url: str
) -> None:
    from fastapi.testclient import TestClient

    with TestClient(example.create_api(database_url, worker=FAST)) as client:
        created = client.post("/users", params={"name": "ada"})
        assert created.status_code == 201, created.text
        body = created.json()

        def finished() -> bool:
            return client.get(f"/jobs/{body['job']}").json()["status"] == "SUCCEEDED"

        poll(finished)
        assert client.get(f"/jobs/{body['job']}").json()["result"] == '"Welcome, ada!"'
        assert client.get(f"/users/{body['user']}").json()["welcomed"] is True


def test_a_failing_request_leaves_no_row_and_no_job(example: Any, database_url: str) -> None:
    from fastapi.testclient import TestClient

    api = example.create_api(database_url, worker=False)
    with TestClient(api) as client:
        refused = client.post("/users", params={"name": "bob", "fail": "true"})
        assert refused.status_code == 409
        assert client.get("/users/1").status_code == 404
        kept = client.post("/users", params={"name": "cy"})
        assert kept.status_code == 201
    with Ratchet(database_url, allowed_modules=["app."]) as app:
        jobs = app.list_jobs()
    assert [(j.target, j.status) for j in jobs] == [("app.jobs:send_welcome", JobStatus.PENDING)]
    assert str(jobs[0].job_id) == kept.json()["job"]


class Recording(Ratchet):
    """A Ratchet app that notes when it is closed."""

    closed = 0

    def close(self) -> None:
        Recording.closed += 1
        super().close()


def test_the_lifespan_opens_the_app_and_its_worker_and_closes_them(tmp_path: Path) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from ratchet.integrations.starlette import get_ratchet

    url = f"sqlite:///{tmp_path / 'life.sqlite3'}"
    built: list[Recording] = []

    def factory() -> Recording:
        built.append(Recording(url, allowed_modules=["sample_jobs"]))
        return built[-1]

    def where(request: Request) -> JSONResponse:
        return JSONResponse({"store": get_ratchet(request).store.url})

    Recording.closed = 0
    asgi = Starlette(routes=[Route("/", where)], lifespan=ratchet_lifespan(factory, worker=FAST))
    assert built == []  # nothing opens before start-up
    import threading

    before = {t.ident for t in threading.enumerate()}
    with TestClient(asgi) as client:
        assert len(built) == 1 and Recording.closed == 0
        assert client.get("/").json() == {"store": built[0].store.url}
        started = {t.ident for t in threading.enumerate()} - before
        assert started, "the worker's threads run while the app is up"
    assert Recording.closed == 1
    poll(lambda: not ({t.ident for t in threading.enumerate() if t.is_alive()} & started))


def test_get_ratchet_without_the_lifespan_says_what_to_do() -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from ratchet.integrations.starlette import get_ratchet

    def where(request: Request) -> JSONResponse:
        get_ratchet(request)
        return JSONResponse({})

    with (
        TestClient(Starlette(routes=[Route("/", where)])) as client,
        pytest.raises(RuntimeError, match="lifespan=ratchet_lifespan"),
    ):
        client.get("/")


def test_the_lifespan_refuses_a_factory_that_is_not_callable() -> None:
    with pytest.raises(TypeError, match="factory must build the Ratchet app"):
        ratchet_lifespan(uuid.uuid4())  # type: ignore[arg-type]


def test_the_core_loads_no_framework() -> None:
    """``ratchet``, the lifespan and SessionJobs import neither Starlette nor FastAPI (nor
    Django): only ``ratchet.integrations.fastapi`` loads its framework."""
    import subprocess

    code = (
        "import sys, ratchet, ratchet.integrations.starlette, ratchet.integrations.sessions\n"
        "print(sorted(m for m in ('starlette', 'fastapi', 'django') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
