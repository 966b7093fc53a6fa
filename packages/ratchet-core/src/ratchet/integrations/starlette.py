"""Ratchet in a Starlette (or FastAPI) application: a lifespan that opens the app at start-up and
closes it at shutdown, optionally running a worker in the same process, and the app on requests.

    app = FastAPI(lifespan=ratchet_lifespan(lambda: Ratchet(URL, allowed_modules=["myapp"])))

The lifespan puts the Ratchet app into the ASGI lifespan state under ``"ratchet"``; Starlette
copies that state onto every request, where :func:`get_ratchet` reads it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ratchet.config import WorkerConfig
    from ratchet.engine.app import Ratchet

log = logging.getLogger(__name__)

#: Where the lifespan puts the app in the lifespan state (``request.state.ratchet``).
STATE_KEY = "ratchet"

Lifespan = Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]


def ratchet_lifespan(
    factory: Callable[[], Ratchet],
    *,
    worker: bool | WorkerConfig = False,
    state_key: str = STATE_KEY,
) -> Lifespan:
    """A lifespan that builds the app with ``factory`` at start-up and closes it at shutdown.

    :param worker: also run a worker in this process (``True``: the default
        :class:`~ratchet.config.WorkerConfig`; or a config), started after the app opens and
        drained before it closes. For small deployments; larger ones run ``ratchet worker``
        processes instead.
    :param state_key: the name of the app in the lifespan state.
    """
    if not callable(factory):
        raise TypeError(f"factory must build the Ratchet app (a callable), got {factory!r}")

    @asynccontextmanager
    async def lifespan(_asgi_app: Any) -> AsyncIterator[dict[str, Any]]:
        app = await asyncio.to_thread(factory)
        running = None
        try:
            if worker is not False:
                from ratchet.config import WorkerConfig

                config = worker if isinstance(worker, WorkerConfig) else WorkerConfig()
                running = app.worker(config)
                await asyncio.to_thread(running.start)
            yield {state_key: app}
        finally:
            if running is not None:
                await asyncio.to_thread(running.stop)
            await asyncio.to_thread(app.close)

    return lifespan


def get_ratchet(request: Any, state_key: str = STATE_KEY) -> Ratchet:
    """The Ratchet app that :func:`ratchet_lifespan` opened, from a request (or a websocket).

    :raises RuntimeError: the application was not started with that lifespan.
    """
    app = getattr(request.state, state_key, None)
    if app is None:
        raise RuntimeError(
            f"no Ratchet app in the request state under {state_key!r}: start the application "
            "with lifespan=ratchet_lifespan(...)"
        )
    return app  # type: ignore[no-any-return]
