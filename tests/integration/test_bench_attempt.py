"""``benchmarks/bench_attempt.py`` stays runnable and measures what it says: every timed attempt
of a no-op job succeeds and hands its outcome over (a harness that drifted from the worker's
interfaces once timed a crash at the start check instead)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench_attempt(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_attempt

    return bench_attempt


def test_a_small_round_times_succeeded_attempts_only(bench_attempt: Any) -> None:
    micros = bench_attempt.one_round(jobs=300, claim=100, profile=None)
    assert 0 < micros < 1_000_000


def test_a_round_whose_attempts_do_not_succeed_is_refused(
    bench_attempt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ratchet.engine.attempts import AttemptRunner

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the job's code failed")

    monkeypatch.setattr(AttemptRunner, "resolve", lambda runner, ref: broken)
    with pytest.raises(SystemExit, match="ended DEAD: RuntimeError"):
        bench_attempt.one_round(jobs=100, claim=100, profile=None)
