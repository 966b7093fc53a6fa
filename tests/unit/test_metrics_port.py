"""The metrics port: the core runs without prometheus_client, the catalogue follows Prometheus
conventions, target labels stay bounded, and the worker's measurements say what happened."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
import sample_jobs
from hypothesis import given
from hypothesis import strategies as st

from ratchet import Ratchet, hookimpl, metrics
from ratchet.config import WorkerConfig
from ratchet.domain.model import Outcome, OutcomeKind
from ratchet.metrics import CATALOGUE, OTHER, Measurement, MetricType, TargetLabels
from ratchet.plugins import Plugins, make_plugin_manager

WITHOUT_PROMETHEUS = textwrap.dedent(
    """
    import sys, tempfile
    sys.modules["prometheus_client"] = None  # as if it were not installed
    sys.path.insert(0, {support!r})
    import sample_jobs
    from ratchet import Ratchet
    import ratchet.cli, ratchet.engine.worker, ratchet.metrics
    app = Ratchet(f"sqlite:///{{tempfile.mkdtemp()}}/j.db", allowed_modules=["sample_jobs"])
    app.enqueue(sample_jobs.noop).submit()
    assert app.worker().run_due() == 1
    try:
        import ratchet.exporters.prometheus
    except Exception as exc:
        print(type(exc).__name__, exc)
    """
)


def test_the_core_imports_and_runs_jobs_without_prometheus_client() -> None:
    support = str(Path(sample_jobs.__file__).parent)
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_PROMETHEUS.format(support=support)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ConfigurationError"), result.stdout
    assert "pip install 'ratchet-core[prometheus]'" in result.stdout


def test_the_catalogue_follows_prometheus_conventions() -> None:
    names = [metric.name for metric in CATALOGUE]
    assert len(names) == len(set(names))
    for metric in CATALOGUE:
        assert re.fullmatch(r"ratchet_[a-z_]+", metric.name), metric.name
        assert metric.name.endswith("_total") == (metric.type is MetricType.COUNTER), metric.name
        if metric.type is MetricType.HISTOGRAM:
            assert list(metric.buckets) == sorted(set(metric.buckets)), metric.name
        assert "le" not in metric.labels and metric.help
        assert metric.scope in ("worker", "cluster")


@given(
    targets=st.lists(st.sampled_from([f"m:t{i}" for i in range(30)] + [OTHER])),
    cap=st.integers(0, 10),
)
def test_target_labels_are_bounded_and_stable(targets: list[str], cap: int) -> None:
    label = TargetLabels(cap=cap)
    first = [label(t) for t in targets]
    assert len(set(first) - {OTHER}) <= cap
    assert [label(t) for t in targets] == first, "a target keeps the label it got"
    assert all(out in (t, OTHER) for t, out in zip(targets, first, strict=True))


@given(
    allowed=st.sets(st.sampled_from(["a:x", "a:y", "a:z"])),
    target=st.sampled_from(["a:x", "a:y", "a:z", "b:q"]),
)
def test_an_allowed_set_keeps_exactly_its_targets(allowed: set[str], target: str) -> None:
    assert TargetLabels(allowed)(target) == (target if target in allowed else OTHER)


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        TargetLabels(cap=-1)


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Measurement] = []

    @hookimpl
    def ratchet_metrics_observed(self, measurements: Sequence[Measurement]) -> None:
        self.seen.extend(measurements)

    def values(self, metric: metrics.Metric) -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for x in self.seen:
            if x.metric is metric:
                out[x.labels] = out.get(x.labels, 0) + x.value
        return out


@pytest.fixture
def recorded(sqlite_url: str) -> tuple[Ratchet, Recorder]:
    recorder = Recorder()
    plugins = Plugins(make_plugin_manager(load_entrypoints=False, extra=[recorder]))
    return Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=plugins), recorder


def test_outcomes_are_counted_by_target_priority_and_outcome(
    recorded: tuple[Ratchet, Recorder],
) -> None:
    app, rec = recorded
    app.enqueue(sample_jobs.record, 1).with_priority(4).submit()
    app.enqueue(sample_jobs.fail_always, "x").with_max_retries(1).with_backoff(
        "fixed", timedelta(hours=1)
    ).submit()
    app.enqueue(sample_jobs.fail_permanently).submit()
    worker = app.worker()
    worker.run_due()
    assert rec.values(metrics.JOBS_SUCCEEDED) == {("sample_jobs:record", "critical"): 1}
    assert rec.values(metrics.JOBS_RETRIED) == {("sample_jobs:fail_always", "normal"): 1}
    assert rec.values(metrics.JOBS_DEAD_LETTERED) == {("sample_jobs:fail_permanently", "normal"): 1}
    assert rec.values(metrics.JOBS_FAILED) == {
        ("sample_jobs:fail_always", "normal"): 1,
        ("sample_jobs:fail_permanently", "normal"): 1,
    }
    assert sum(rec.values(metrics.OUTCOME_BATCH_SIZE).values()) == 3
    operations = {labels[0] for labels in rec.values(metrics.STORE_OPERATION_SECONDS)}
    assert operations == {"acquire_work", "record_outcomes"}
    app.close()


def test_a_fenced_outcome_is_not_counted_as_completed(recorded: tuple[Ratchet, Recorder]) -> None:
    app, rec = recorded
    handle = app.enqueue(sample_jobs.record, 1).submit()
    worker = app.worker()
    [job] = worker.poll_once()
    app.cancel_job(handle.id)
    now = app.now()
    fenced = worker.record([Outcome(job.job_id, job.epoch, 1, OutcomeKind.SUCCEEDED, now, now)])
    assert fenced == [job.job_id]
    assert rec.values(metrics.JOBS_STARTED) == {("sample_jobs:record", "normal"): 1}
    assert rec.values(metrics.JOBS_COMPLETED) == {}
    assert rec.values(metrics.OUTCOME_BATCH_SIZE) == {(): 1}, "the write itself is measured"
    app.close()


def test_without_an_exporter_nothing_is_measured_or_sampled(sqlite_url: str) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    worker = app.worker(WorkerConfig(metrics_interval=timedelta(seconds=1)))
    assert not worker.meter.enabled
    worker.sampler.run_once(worker)
    from ratchet.ports import RecurringStore

    leases = app.store.capability(RecurringStore)
    assert leases is not None
    assert leases.try_lock(
        "ratchet-metrics-sampler", "someone-else", now=app.now(), lease=timedelta(seconds=5)
    ), "a worker without an exporter never takes the sampling lease"
    app.close()


def test_the_docs_table_lists_every_metric_with_its_type_and_labels() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
    rows = re.findall(r"^\| `(ratchet_[a-z_]+)` \| (\w+) \| ([^|]+) \|", page.read_text(), re.M)
    documented = {name: (kind, labels.strip()) for name, kind, labels in rows}
    expected = {
        metric.name: (
            metric.type.value,
            ", ".join(f"`{label}`" for label in metric.labels) or "none",
        )
        for metric in CATALOGUE
    }
    assert documented == expected
