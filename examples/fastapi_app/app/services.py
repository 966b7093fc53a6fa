"""Application code that the web endpoints and the jobs share."""

from __future__ import annotations

import asyncio

from sqlalchemy import create_engine, update
from sqlalchemy.engine import Engine

from app.models import User

_engines: dict[str, Engine] = {}


def engine_for(url: str) -> Engine:
    """One engine per database URL in this process (the API's and the worker's jobs')."""
    if url not in _engines:
        _engines[url] = create_engine(url)
    return _engines[url]


def welcome_text(name: str) -> str:
    return f"Welcome, {name}!"


async def deliver(address: str, text: str) -> None:
    """Stand-in for an async mail or HTTP client."""
    await asyncio.sleep(0)


def mark_welcomed(url: str, user_id: int) -> None:
    with engine_for(url).begin() as conn:
        conn.execute(update(User).where(User.id == user_id).values(welcomed=True))
