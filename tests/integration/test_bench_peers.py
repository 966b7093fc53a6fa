"""``benchmarks/bench_peers.py`` stays runnable: its Ratchet side, at a small size, against the
test run's PostgreSQL server. The peers' side (pgqueuer, huey) needs the benchmark-only
dependency group, which CI does not install, so it is not run here; only the message that names
the group when a peer is missing is checked."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

pytestmark = pytest.mark.postgres

LABELS = [
    "PG processing, defaults",
    "PG processing, best settings",
    "PG batch enqueue (1,000 per call)",
    "PG batch enqueue, enqueue_many (1,000 per call)",
    "PG single enqueue (1 per transaction)",
    "SQLite processing, defaults",
    "SQLite processing, best settings",
    "SQLite single enqueue",
    "reference: bare psycopg loop (claim 100 + complete)",
    "PG PostgresStore alone (claim 100 + record)",
]


@pytest.fixture
def bench_peers(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_peers

    return bench_peers


def _tables(out: str) -> list[dict[str, str]]:
    """The printed tables, each as {first cell: second cell} of its body rows (the header and
    the separator line left out)."""
    tables: list[dict[str, str]] = []
    for block in out.split("\n\n"):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        cells = [[c.strip() for c in line.split("|")] for line in lines[2:]]
        if cells:
            tables.append({row[1]: row[2] for row in cells})
    return tables


def test_the_ratchet_side_of_a_quick_run_measures_every_row(
    bench_peers: Any, postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every row has a rate; every PostgreSQL row the server's CPU per job, read from the
    processes of the server whose data directory is given, and what the server wrote per job,
    read from its WAL; every PostgreSQL processing row the worker process's CPU per job, in all
    and by thread."""
    argv = ["--quick", "--ratchet-only", "--url", postgres_server.url()]
    assert bench_peers.main([*argv, "--data-dir", str(postgres_server.data_dir)]) == 0
    out = capsys.readouterr().out
    rates, database_cpu, worker_cpu, client_cpu, writes, _ = _tables(out)
    processing = {label for label in LABELS if label.startswith("PG processing")}
    assert processing and set(worker_cpu) == processing
    for label in processing:
        assert float(worker_cpu[label].replace(",", "")) > 0, f"{label}: {worker_cpu[label]}"
    # Ratchet's worker CPU by thread: its job threads, poller and writer are told apart by the
    # names they carry in the OS, and each of them worked.
    by_thread = [line for line in out.splitlines() if line.startswith("| PG processing")][-2:]
    assert {row.split("|")[1].strip() for row in by_thread} == processing
    for row in by_thread:
        jobs, poller, writer = (float(cell) for cell in row.split("|")[2:5])
        assert jobs > 0 and poller > 0 and writer > 0, row
    for label in LABELS:
        assert float(rates[label].replace(",", "")) > 0, f"{label}: {rates.get(label)}"
    # The rows whose client runs in the benchmark's process: its CPU per job, which a client
    # that does anything at all spends.
    in_process = {
        label
        for label in LABELS
        if label.startswith(("PG batch", "PG single", "reference:", "PG PostgresStore"))
    }
    assert set(client_cpu) == in_process
    for label in in_process:
        assert float(client_cpu[label].replace(",", "")) > 0, f"{label}: {client_cpu[label]}"
    metered = {label for label in LABELS if not label.startswith("SQLite")}
    assert set(database_cpu) == metered
    for label in metered:
        assert float(database_cpu[label].replace(",", "")) > 0, f"{label}: {database_cpu[label]}"
    assert set(writes) == metered
    for label in metered:
        figures = re.fullmatch(r"([\d,]+) B WAL, ([\d.]+) rows, .*", writes[label])
        assert figures is not None, f"{label}: {writes[label]}"
        wal, rows = figures.groups()
        # A job is at least two rows wherever it goes: enqueued (key, job and queue rows),
        # processed (the claim's update and the outcome's delete), or the bare loop's own.
        assert float(wal.replace(",", "")) > 0 and float(rows) >= 2, f"{label}: {writes[label]}"


def test_a_missing_peer_names_the_dependency_group(
    bench_peers: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pgqueuer", None)  # importing it now fails
    with pytest.raises(SystemExit) as exited:
        bench_peers.main(["--quick"])
    assert exited.value.code == 2
    assert "uv run --group bench" in capsys.readouterr().err
