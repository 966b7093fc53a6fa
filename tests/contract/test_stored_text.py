"""Text in job arguments: what every store keeps exactly, and what every store refuses alike.

PostgreSQL cannot hold U+0000 in ``text`` or ``jsonb``, and no database stores a lone surrogate
as UTF-8; the checks happen before the store is reached, so every backend answers the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sample_jobs

from ratchet import JobStatus, Ratchet, UnserializableArgument
from ratchet.serialization import decode_payload

#: Text every store must keep exactly: NUL (stored escaped as JSON's \u0000), accents, CJK,
#: characters outside the Basic Multilingual Plane (4 bytes in UTF-8), in values and keys.
TEXTS: list[Any] = [
    "a\x00b",
    "\x00",
    "é中文🎉",
    {"k\x00é": ["\x00", "\U0001f600", "ß"]},
]


@pytest.fixture
def app(store: Any) -> Iterator[Ratchet]:
    app = Ratchet(store.url, allowed_modules=["sample_jobs"], auto_migrate=False)
    yield app
    app.close()


def run_all(app: Ratchet) -> None:
    worker = app.worker(concurrency=10)
    while jobs := worker.poll_once():
        outcomes = [worker.execute(j) for j in jobs]
        for j in jobs:
            worker._inflight.pop(j.job_id)
        worker.record([o for o in outcomes if o is not None])


def test_nul_and_non_ascii_text_in_arguments_round_trips(app: Ratchet) -> None:
    one = app.enqueue(sample_jobs.record, TEXTS).submit()
    many = app.submit_many([app.enqueue(sample_jobs.record, [t, i]) for i, t in enumerate(TEXTS)])
    expected = {
        one.id: TEXTS,
        **{h.id: [t, i] for i, (h, t) in enumerate(zip(many, TEXTS, strict=True))},
    }
    for job_id, value in expected.items():
        payload = app.get_job(job_id).payload
        assert decode_payload(payload, app.enums) == ([value], {})
    run_all(app)
    for handle in (one, *many):
        assert handle.status() is JobStatus.SUCCEEDED and handle.result() == expected[handle.id]


@pytest.mark.parametrize(
    "argument",
    [pytest.param("bad \ud800", id="lone-surrogate"), pytest.param({"\udcff": 1}, id="in-a-key")],
)
def test_lone_surrogates_in_arguments_are_refused_alike(app: Ratchet, argument: Any) -> None:
    with pytest.raises(UnserializableArgument, match="lone surrogate"):
        app.enqueue(sample_jobs.record, argument).submit()
    with pytest.raises(UnserializableArgument, match="lone surrogate"):
        app.submit_many(
            [app.enqueue(sample_jobs.record, 1), app.enqueue(sample_jobs.record, argument)]
        )
    assert app.list_jobs() == []
