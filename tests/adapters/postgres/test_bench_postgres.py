"""A bounded run of ``benchmarks/bench_postgres.py``'s burst row: one default worker polls an
analyzed empty queue, then drains the jobs submitted at once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"

pytestmark = pytest.mark.postgres


@pytest.fixture
def bench_postgres(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_postgres

    return bench_postgres


def test_a_burst_after_an_idle_spell_is_drained(
    bench_postgres: Any, postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--url", postgres_server.url(), "--only", "burst", "--runs", "1"]
    assert bench_postgres.main([*argv, "--jobs", "300", "--idle", "3"]) == 0
    out = capsys.readouterr().out
    row = re.search(r"\| a burst after 3 s idle, 1 default worker \| ([\d,]+) jobs/s \|", out)
    assert row is not None, out
    assert int(row.group(1).replace(",", "")) > 0
