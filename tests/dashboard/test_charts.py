"""The throughput history: per-minute rates from cumulative queue health windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ratchet.domain.query import QueueHealth
from ratchet_dashboard.charts import Sample, Throughput, line_chart

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def health_with(ended: dict[int, tuple[int, int]]) -> object:
    """A ``health(window)`` whose jobs ended ``ended[minutes ago] = (ok, failed)``."""

    def health(window: timedelta) -> QueueHealth:
        ok = sum(n for ago, (n, _) in ended.items() if timedelta(minutes=ago) <= window)
        bad = sum(n for ago, (_, n) in ended.items() if timedelta(minutes=ago) <= window)
        return QueueHealth(
            at=NOW,
            window=window,
            live={},
            failed=0,
            due_now=0,
            oldest_due=None,
            succeeded_in_window=ok,
            failed_in_window=bad,
            canceled_in_window=0,
            running_by_node={},
        )

    return health


def test_history_buckets_are_differences_of_cumulative_windows() -> None:
    chart = Throughput()
    # 50 jobs ended 3 minutes ago (bucket 1), 20 + 5 failures 12 minutes ago (bucket 3).
    chart.load_history(health_with({3: (50, 0), 12: (20, 5)}), buckets=4)  # type: ignore[arg-type]
    assert chart.history_loaded.wait(timeout=10)
    samples = chart.samples()
    assert [s.at for s in samples] == [NOW - timedelta(minutes=m) for m in (15, 10, 5, 0)]
    assert [(s.succeeded, s.failed) for s in samples] == [(0, 0), (4, 1), (0, 0), (10, 0)]


def test_history_goes_before_the_live_samples_and_loads_once() -> None:
    chart = Throughput()
    chart.add(Sample(NOW + timedelta(seconds=30), 7, 1))
    calls: list[timedelta] = []

    def health(window: timedelta) -> QueueHealth:
        calls.append(window)
        return health_with({})(window)  # type: ignore[operator,no-any-return]

    chart.load_history(health, buckets=3)
    chart.load_history(health, buckets=3)
    assert chart.history_loaded.wait(timeout=10)
    assert len(calls) == 3
    samples = chart.samples()
    assert [s.at for s in samples] == [
        NOW - timedelta(minutes=10),
        NOW - timedelta(minutes=5),
        NOW,
        NOW + timedelta(seconds=30),
    ]
    assert (samples[-1].succeeded, samples[-1].failed) == (7, 1)


def test_a_failing_history_leaves_the_live_samples() -> None:
    chart = Throughput()
    chart.add(Sample(NOW, 3, 0))

    def broken(window: timedelta) -> QueueHealth:
        raise ConnectionError("database down")

    chart.load_history(broken)
    assert chart.history_loaded.wait(timeout=10)
    assert chart.samples() == [Sample(NOW, 3, 0)]


def test_the_chart_draws_both_lines_once_it_has_two_samples() -> None:
    one = line_chart([Sample(NOW, 1, 0)])
    assert "polyline" not in one and "collecting samples" in one
    two = line_chart([Sample(NOW, 1, 0), Sample(NOW + timedelta(minutes=1), 4, 2)])
    assert two.count("<polyline") == 2
    assert ">4<" in two  # the peak on the axis
