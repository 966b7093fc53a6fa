"""Every way to submit through the API answers a taken key alike, on every store backend.

The store-level check of each entry point is the store contract's ``SUBMISSION_PATHS``; these
tests drive the public API, whose builders put the keys where a user puts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import flow_jobs
import gate_jobs
import pytest

from ratchet import (
    DuplicateBusinessKeyError,
    JobFilter,
    Ratchet,
)

KEY = "invoice-2026-17"


@pytest.fixture
def app(store: Any) -> Iterator[Ratchet]:
    app = Ratchet(store.url, allowed_modules=["gate_jobs", "flow_jobs"], auto_migrate=False)
    yield app
    app.close()


def _many(app: Ratchet) -> Any:
    return app.submit_many(
        [app.enqueue(gate_jobs.plain, 1), app.enqueue(gate_jobs.plain, 2).with_business_key(KEY)]
    )


PATHS: dict[str, Callable[[Ratchet], Any]] = {
    "submit": lambda app: app.enqueue(gate_jobs.plain, 1).with_business_key(KEY).submit(),
    "submit_many": _many,
    "then": lambda app: (
        app.enqueue(gate_jobs.plain, 1).with_business_key(KEY).then(gate_jobs.plain, 2).submit()
    ),
    "then_on_success": lambda app: (
        app.enqueue(gate_jobs.plain, 1)
        .with_business_key(KEY)
        .then_on_success(gate_jobs.plain, 2)
        .submit()
    ),
    "on_success": lambda app: (
        app.enqueue(gate_jobs.plain, 1).with_business_key(KEY).on_success(flow_jobs.on_ok).submit()
    ),
    "with_await_signal": lambda app: (
        app.enqueue(gate_jobs.plain, 1)
        .with_business_key(KEY)
        .with_await_signal("approve:17", timedelta(hours=1))
        .submit()
    ),
}


@pytest.mark.parametrize("path", PATHS)
def test_a_taken_business_key_raises_the_typed_error_on_every_submit_path(
    app: Ratchet, path: str
) -> None:
    holder = app.enqueue(gate_jobs.plain, 0).with_business_key(KEY).submit()
    with pytest.raises(DuplicateBusinessKeyError) as err:
        PATHS[path](app)
    assert (err.value.key, err.value.holder) == (KEY, holder.id)
    assert [r.job_id for r in app.list_jobs(JobFilter())] == [holder.id], "nothing was stored"


def test_a_taken_recurring_business_key_raises_the_typed_error(app: Ratchet) -> None:
    def master() -> Any:
        return app.schedule_recurring_utc("0 0 * * * ?", gate_jobs.plain, 1).with_business_key(KEY)

    first = master().submit()
    with pytest.raises(DuplicateBusinessKeyError) as err:
        master().submit()
    assert (err.value.key, err.value.holder) == (KEY, first.id)
