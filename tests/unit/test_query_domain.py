"""The query API's pure parts: filters, page sizes, cursors."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.query import (
    MAX_PAGE,
    InvalidCursor,
    InvalidQuery,
    JobQuery,
    QueueHealth,
    check_limit,
    decode_cursor,
    encode_cursor,
)
from ratchet.engine.jobs_api import make_query

T0 = datetime(2026, 1, 1, tzinfo=UTC)

queries = st.builds(
    JobQuery,
    statuses=st.lists(st.sampled_from(list(JobStatus)), max_size=3).map(tuple),
    target=st.none() | st.text("abc.:_", min_size=1, max_size=8),
    tag=st.none() | st.text("xyz", min_size=1, max_size=4),
    business_key=st.none() | st.text("kq-", min_size=1, max_size=4),
    batch_id=st.none() | st.uuids(),
)


@given(st.uuids(), queries)
def test_cursor_round_trips(last: uuid.UUID, query: JobQuery) -> None:
    cursor = encode_cursor(last, query)
    assert decode_cursor(cursor, query) == last
    assert cursor.isascii() and "=" not in cursor and "/" not in cursor and "+" not in cursor


@given(st.uuids(), queries, st.data())
def test_any_altered_character_is_refused(
    last: uuid.UUID, query: JobQuery, data: st.DataObject
) -> None:
    cursor = encode_cursor(last, query)
    at = data.draw(st.integers(0, len(cursor) - 1))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    other = data.draw(st.sampled_from([c for c in alphabet if c != cursor[at]]))
    tampered = cursor[:at] + other + cursor[at + 1 :]
    try:
        decoded = decode_cursor(tampered, query)
    except InvalidCursor:
        return
    # The last character carries padding bits base64 ignores: the same bytes decode.
    assert decoded == last and base64.urlsafe_b64decode(tampered + "=") == base64.urlsafe_b64decode(
        cursor + "="
    )


def test_a_cursor_moved_to_another_id_is_refused() -> None:
    query = JobQuery(statuses=(JobStatus.FAILED,))
    raw = bytearray(base64.urlsafe_b64decode(encode_cursor(uuid.uuid4(), query) + "="))
    raw[5] ^= 0x01  # a byte of the job id, checksum left as it was
    forged = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(InvalidCursor, match="altered"):
        decode_cursor(forged, query)


def test_a_cursor_of_other_filters_is_refused() -> None:
    cursor = encode_cursor(uuid.uuid4(), JobQuery(statuses=(JobStatus.FAILED,)))
    with pytest.raises(InvalidCursor, match="other filters"):
        decode_cursor(cursor, JobQuery(statuses=(JobStatus.PENDING,)))
    with pytest.raises(InvalidCursor, match="other filters"):
        decode_cursor(cursor, JobQuery())


@pytest.mark.parametrize("junk", ["", "x", "%%%", "A" * 65, "not a cursor at all", "AAAA" * 11])
def test_junk_is_not_a_cursor(junk: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(junk, JobQuery())


def test_fingerprint_ignores_status_order_and_case() -> None:
    a = JobQuery(statuses=("failed", JobStatus.PENDING))  # type: ignore[arg-type]
    b = JobQuery(statuses=(JobStatus.PENDING, JobStatus.FAILED))
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != JobQuery(statuses=(JobStatus.PENDING,)).fingerprint()
    assert JobQuery(tag="EU").tag == "eu"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"statuses": ("DONE",)}, "unknown status"),
        ({"target": ""}, "must not be empty"),
        ({"created_after": T0, "created_before": T0}, "empty time range"),
        ({"finished_after": T0 + timedelta(1), "finished_before": T0}, "empty time range"),
        ({"created_after": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"batch_id": "not-a-uuid"}, "must be a UUID"),
    ],
)
def test_bad_filters_are_typed_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidQuery, match=message):
        JobQuery(**fields)  # type: ignore[arg-type]


def test_unstorable_filter_text_is_refused() -> None:
    with pytest.raises(InvalidJobOptions):
        JobQuery(tag="a\udc00")


@pytest.mark.parametrize("limit", [0, -1, MAX_PAGE + 1, True, 2.0, "10"])
def test_limits_outside_the_range_are_refused(limit: object) -> None:
    with pytest.raises(InvalidQuery, match="limit"):
        check_limit(limit)  # type: ignore[arg-type]


def test_keyword_filters_build_the_query() -> None:
    assert make_query(status="failed", target="m:f") == JobQuery(
        statuses=(JobStatus.FAILED,), target="m:f"
    )
    assert make_query(status=["PENDING", "RUNNING"]).statuses == (
        JobStatus.PENDING,
        JobStatus.RUNNING,
    )
    with pytest.raises(InvalidQuery, match="unknown filter colour"):
        make_query(colour="red")
    with pytest.raises(InvalidQuery, match="not both"):
        make_query(JobQuery(), target="m:f")


def test_health_derived_values() -> None:
    health = QueueHealth(
        at=T0,
        window=timedelta(minutes=5),
        live={"PENDING": 7, "RUNNING": 2},
        failed=3,
        due_now=4,
        oldest_due=T0 - timedelta(seconds=90),
        succeeded_in_window=20,
        failed_in_window=4,
        canceled_in_window=1,
    )
    assert (health.pending, health.running) == (7, 2)
    assert health.oldest_pending_age == timedelta(seconds=90)
    assert health.throughput_per_minute == 5.0
    future = QueueHealth(T0, timedelta(minutes=1), {}, 0, 0, T0 + timedelta(1), 0, 0, 0)
    assert future.oldest_pending_age == timedelta(0) and future.throughput_per_minute == 0.0
