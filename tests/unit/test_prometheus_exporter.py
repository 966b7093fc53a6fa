"""The Prometheus collector against prometheus_client's own registry and text format."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime

import pytest
import sample_jobs
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ratchet import Ratchet
from ratchet import metrics as m
from ratchet.domain.errors import ConfigurationError
from ratchet.exporters.prometheus import RatchetCollector, serve
from ratchet.metrics import Measurement, MetricsSample, MetricType

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def registry_with(collector: RatchetCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


def sample(local: tuple[Measurement, ...] = (), cluster: tuple[Measurement, ...] | None = None):
    return MetricsSample("node-1", NOW, local, cluster)


def test_counters_add_up_and_carry_their_labels() -> None:
    collector = RatchetCollector()
    registry = registry_with(collector)
    done = Measurement(m.JOBS_COMPLETED, ("app:send", "succeeded"), 1)
    collector.ratchet_metrics_observed([done, done])
    collector.ratchet_metrics_observed([done])
    labels = {"target": "app:send", "outcome": "succeeded"}
    assert registry.get_sample_value("ratchet_jobs_completed_total", labels) == 3
    assert (
        registry.get_sample_value("ratchet_jobs_completed_total", {**labels, "outcome": "x"})
        is None
    )


def test_histograms_have_cumulative_buckets_sum_and_count() -> None:
    collector = RatchetCollector()
    registry = registry_with(collector)
    collector.ratchet_metrics_observed(
        [Measurement(m.RUN_DURATION, ("app:send",), v) for v in (0.002, 0.002, 0.7, 9999)]
    )
    get = registry.get_sample_value
    t = {"target": "app:send"}
    assert get("ratchet_job_run_duration_seconds_bucket", {**t, "le": "0.001"}) == 0
    assert get("ratchet_job_run_duration_seconds_bucket", {**t, "le": "0.005"}) == 2
    assert get("ratchet_job_run_duration_seconds_bucket", {**t, "le": "1.0"}) == 3
    assert get("ratchet_job_run_duration_seconds_bucket", {**t, "le": "600.0"}) == 3
    assert get("ratchet_job_run_duration_seconds_bucket", {**t, "le": "+Inf"}) == 4
    assert get("ratchet_job_run_duration_seconds_count", t) == 4
    assert get("ratchet_job_run_duration_seconds_sum", t) == pytest.approx(9999.704)


def test_targets_beyond_the_configured_set_become_other() -> None:
    collector = RatchetCollector(targets=["app:keep"])
    registry = registry_with(collector)
    collector.ratchet_metrics_observed(
        [
            Measurement(m.JOBS_STARTED, ("app:keep", "high"), 1),
            Measurement(m.JOBS_STARTED, ("app:a", "high"), 1),
            Measurement(m.JOBS_STARTED, ("app:b", "high"), 1),
        ]
    )
    get = registry.get_sample_value
    assert get("ratchet_jobs_started_total", {"target": "app:keep", "priority": "high"}) == 1
    assert get("ratchet_jobs_started_total", {"target": "other", "priority": "high"}) == 2
    assert get("ratchet_jobs_started_total", {"target": "app:a", "priority": "high"}) is None


def test_the_target_cap_bounds_the_series() -> None:
    collector = RatchetCollector(max_targets=2)
    registry = registry_with(collector)
    collector.ratchet_metrics_observed(
        [Measurement(m.RUN_DURATION, (f"app:t{i}",), 0.1) for i in range(50)]
    )
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    targets = {s.labels["target"] for s in families["ratchet_job_run_duration_seconds"].samples}
    assert targets == {"app:t0", "app:t1", "other"}


def test_a_sample_replaces_the_last_and_cluster_gauges_vanish_without_the_lease() -> None:
    collector = RatchetCollector()
    registry = registry_with(collector)
    get = registry.get_sample_value
    depth = Measurement(m.QUEUE_DEPTH, ("PENDING", "normal"), 12)
    collector.ratchet_metrics_sampled(
        sample((Measurement(m.SLOTS, ("busy",), 3), Measurement(m.CLAIMS, (), 40)), (depth,))
    )
    assert get("ratchet_worker_slots", {"state": "busy"}) == 3
    assert get("ratchet_claims_total") == 40, "a sampled running total is a counter's value"
    assert get("ratchet_queue_depth", {"status": "PENDING", "priority": "normal"}) == 12
    collector.ratchet_metrics_sampled(sample((Measurement(m.SLOTS, ("busy",), 1),), None))
    assert get("ratchet_worker_slots", {"state": "busy"}) == 1
    assert get("ratchet_queue_depth", {"status": "PENDING", "priority": "normal"}) is None, (
        "another node holds the lease: this one exports no cluster gauge"
    )


def test_cancellations_are_counted_only_with_job_events(sqlite_url: str) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    quiet, counting = RatchetCollector().install(app), RatchetCollector()
    assert not app.observed(), "the collector alone builds no job events"
    counting.install(app, job_events=True)
    assert app.observed()
    app.cancel_job(app.enqueue(sample_jobs.noop).submit().id)
    assert registry_with(counting).get_sample_value("ratchet_jobs_canceled_total") == 1
    assert registry_with(quiet).get_sample_value("ratchet_jobs_canceled_total") is None
    app.close()


def test_breaker_states_are_sampled_from_the_resilience_strategy(sqlite_url: str) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    collector = RatchetCollector().install(app)
    registry = registry_with(collector)
    app.configure_breaker("mail")
    app.configure_breaker("billing")
    app.open_breaker("mail")
    worker = app.worker()
    worker.sampler.run_once(worker)
    get = registry.get_sample_value
    assert get("ratchet_circuit_breaker_state", {"service": "mail", "state": "open"}) == 1
    assert get("ratchet_circuit_breaker_state", {"service": "mail", "state": "closed"}) == 0
    assert get("ratchet_circuit_breaker_state", {"service": "billing", "state": "closed"}) == 1
    app.close()


def test_every_catalogue_metric_is_exposed_with_its_type_and_help() -> None:
    registry = registry_with(RatchetCollector())
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    for metric in m.CATALOGUE:
        name = (
            metric.name.removesuffix("_total") if metric.type is MetricType.COUNTER else metric.name
        )
        assert families[name].type == metric.type.value, metric.name
        assert families[name].documentation == metric.help


def test_serve_answers_scrapes_and_refuses_a_taken_port() -> None:
    collector = RatchetCollector()
    collector.ratchet_metrics_observed([Measurement(m.CLAIMED_JOBS, (), 5)])
    server = serve(collector, 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert "ratchet_claimed_jobs_total 5.0" in text
        assert "process_cpu_seconds_total" in text, "the served registry has the process metrics"
        with pytest.raises(ConfigurationError, match="choose another --metrics-port"):
            serve(collector, server.port)
    finally:
        server.close()
