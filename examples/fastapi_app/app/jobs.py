"""Job targets. ``async def`` targets run on the worker's asyncio executor; they use the same
services as the endpoints."""

from __future__ import annotations

import asyncio

from app import services


async def send_welcome(url: str, user_id: int, name: str) -> str:
    text = services.welcome_text(name)
    await services.deliver(f"user-{user_id}", text)
    await asyncio.to_thread(services.mark_welcomed, url, user_id)
    return text
