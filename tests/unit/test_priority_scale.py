"""One priority scale everywhere: a JobPriority, or its value 0..4."""

from __future__ import annotations

from typing import Any

import pytest

from ratchet import InvalidJobOptions, JobOptions, JobPriority
from ratchet.domain.options import job_priority


@pytest.mark.parametrize("value", [*JobPriority, 0, 1, 2, 3, 4])
def test_members_and_their_values_are_accepted(value: Any) -> None:
    assert job_priority(value) is JobPriority(value)
    assert JobOptions(priority=value).priority is JobPriority(value)


@pytest.mark.parametrize("value", [5, -1, True, False, 2.0, "2", "HIGH", None])
def test_anything_else_is_refused(value: Any) -> None:
    with pytest.raises(InvalidJobOptions, match=r"priority must be 0\.\.4 \(LOWEST 0"):
        job_priority(value)
    with pytest.raises(InvalidJobOptions):
        JobOptions(priority=value)


def test_builders_use_the_same_scale(sqlite_url: str) -> None:
    import sample_jobs

    from ratchet import Ratchet

    with Ratchet(sqlite_url, allowed_modules=["sample_jobs"]) as app:
        for value in (5, True):
            builder = app.enqueue(sample_jobs.noop)
            with pytest.raises(InvalidJobOptions, match=r"priority must be 0\.\.4"):
                builder.with_priority(value)
            builder.submit()
            with pytest.raises(InvalidJobOptions, match=r"priority must be 0\.\.4"):
                app.enqueue_batch("b").with_priority(value)
        handle = app.enqueue(sample_jobs.noop).with_priority(3).submit()
        assert handle.record().priority is JobPriority.HIGH  # type: ignore[union-attr]
