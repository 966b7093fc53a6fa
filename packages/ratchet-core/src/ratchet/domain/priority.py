"""Effective priority with age boost (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

DEFAULT_BOOST_INTERVAL = timedelta(minutes=15)


def effective_priority(
    priority: int, scheduled_time: datetime, now: datetime, boost_interval: timedelta
) -> int:
    """``priority + floor(wait / boost_interval)``; the wait counts from the scheduled time.

    A zero interval disables the boost. A job not yet due has no boost.
    """
    if boost_interval <= timedelta(0) or now <= scheduled_time:
        return priority
    return priority + (now - scheduled_time) // boost_interval


def claim_order_key(
    priority: int, scheduled_time: datetime, job_id: str, now: datetime, boost_interval: timedelta
) -> tuple[int, datetime, str]:
    """Sort key of the claim order: effective priority desc, then scheduled time, then id."""
    return (
        -effective_priority(priority, scheduled_time, now, boost_interval),
        scheduled_time,
        job_id,
    )
