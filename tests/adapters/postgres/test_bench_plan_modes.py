"""A bounded run of ``benchmarks/bench_plan_modes.py``: the claim and the outcome write sent
with their text and prepared, alternating call by call on one queue until it is drained."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"

pytestmark = pytest.mark.postgres


@pytest.fixture
def bench_plan_modes(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_plan_modes

    return bench_plan_modes


def test_both_ways_drain_the_queue_and_are_reported(
    bench_plan_modes: Any, postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--url", postgres_server.url(), "--jobs", "400", "--batches", "50,10"]
    assert bench_plan_modes.main(argv) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (\d+) \| ([\d,.]+) \| ([\d,.]+) \| ([\d.]+) \|", out, re.MULTILINE)
    assert [batch for batch, *_ in rows] == ["50", "10"], out
    for _, text, prepared, ratio in rows:
        slow, fast = float(text.replace(",", "")), float(prepared.replace(",", ""))
        assert slow > 0 and fast > 0
        assert float(ratio) == pytest.approx(fast / slow, abs=0.006)
