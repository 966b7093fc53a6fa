"""Prometheus exporter of the metrics port, on the official ``prometheus_client`` library.

Optional: ``pip install 'ratchet-core[prometheus]'``; nothing in the core imports this module.

:class:`RatchetCollector` is both a Ratchet plugin (it implements ``ratchet_metrics_observed``,
``ratchet_metrics_sampled`` and ``ratchet_job_event``) and a ``prometheus_client`` collector:
register it with an app (:meth:`RatchetCollector.install`) and with any registry, or let
:func:`serve` give it a registry and an HTTP endpoint (``ratchet worker --metrics-port``).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from ratchet.domain.breaker import BreakerState
from ratchet.domain.errors import ConfigurationError
from ratchet.events import EventKind, JobEvent
from ratchet.metrics import (
    CATALOGUE,
    JOBS_CANCELED,
    Measurement,
    Metric,
    MetricsSample,
    MetricType,
    TargetLabels,
)

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.core import Metric as PromMetric
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised by the import test in a fresh venv
    raise ConfigurationError(
        "the Prometheus exporter needs the prometheus_client library: "
        "pip install 'ratchet-core[prometheus]'"
    ) from exc

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from ratchet.engine.app import Ratchet

hookimpl = pluggy.HookimplMarker("ratchet")

_MEMO_LIMIT = 100_000
"""Distinct label sets whose bounded form is remembered (a bound on memory, not on series)."""

DEFAULT_ADDRESS = "127.0.0.1"
"""Where :func:`serve` listens unless told otherwise: loopback only."""

Labels = tuple[str, ...]
_BREAKER_STATES = tuple(s.value.lower() for s in BreakerState if s is not BreakerState.DISABLED)


class _Histogram:
    """Bucket counts (not cumulative), the sum and the count of one label set."""

    __slots__ = ("count", "counts", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size
        self.count = 0
        self.sum = 0.0


class RatchetCollector(Collector):
    """Ratchet's metrics as a ``prometheus_client`` collector (see ``docs/observability.md``).

    :param targets: the job targets that keep their name in the ``target`` label; every other
        target is exported as ``other``. None: the first ``max_targets`` targets seen.
    :param max_targets: the cap on distinct ``target`` values when ``targets`` is None.
    """

    def __init__(self, *, targets: Iterable[str] | None = None, max_targets: int = 100) -> None:
        self.target_label = TargetLabels(targets, max_targets)
        self._lock = threading.Lock()
        self._counters: dict[Metric, dict[Labels, float]] = {}
        self._histograms: dict[Metric, dict[Labels, _Histogram]] = {}
        self._local: dict[Metric, dict[Labels, float]] = {}
        self._cluster: dict[Metric, dict[Labels, float]] = {}
        self._events = _EventObserver(self)
        self._bounded: dict[int, dict[Labels, Labels]] = {}
        """Per position of the ``target`` label: label values as given -> as exported."""
        self._target_at = {
            metric: metric.labels.index("target")
            for metric in CATALOGUE
            if "target" in metric.labels
        }
        self._bounded = {at: {} for at in set(self._target_at.values())}

    # ------------------------------------------------------------------ wiring
    def install(self, app: Ratchet, *, job_events: bool = False) -> RatchetCollector:
        """Register this collector as a plugin of ``app`` (its workers then feed it).

        :param job_events: also observe the app's job events, to count the jobs this process
            canceled (``ratchet_jobs_canceled_total``). Off by default: an event observer makes
            the worker build two events for every job, which costs more than all the rest.
        """
        pm = app.plugins.pm
        if not pm.is_registered(self):
            pm.register(self, name=f"ratchet-prometheus-{id(self)}")
        if job_events and not pm.is_registered(self._events):
            pm.register(self._events, name=f"ratchet-prometheus-events-{id(self)}")
        return self

    # ------------------------------------------------------------------ the hooks
    @hookimpl
    def ratchet_metrics_observed(self, measurements: Sequence[Measurement]) -> None:
        target_at, bounded = self._target_at, self._bounded
        histogram = MetricType.HISTOGRAM
        with self._lock:
            for metric, labels, value in measurements:
                at = target_at.get(metric)
                if at is not None:
                    memo = bounded[at]
                    given = labels
                    labels = memo.get(given)  # type: ignore[assignment]
                    if labels is None:
                        if len(memo) >= _MEMO_LIMIT:
                            memo.clear()
                        target = self.target_label(given[at])
                        labels = memo[given] = (*given[:at], target, *given[at + 1 :])
                if metric.type is histogram:
                    series = self._histograms.get(metric)
                    if series is None:
                        series = self._histograms[metric] = {}
                    hist = series.get(labels)
                    if hist is None:
                        hist = series[labels] = _Histogram(len(metric.buckets) + 1)
                    hist.counts[bisect_left(metric.buckets, value)] += 1  # last: above all
                    hist.count += 1
                    hist.sum += value
                else:
                    counters = self._counters.get(metric)
                    if counters is None:
                        counters = self._counters[metric] = {}
                    counters[labels] = counters.get(labels, 0.0) + value

    @hookimpl
    def ratchet_metrics_sampled(self, sample: MetricsSample) -> None:
        local: dict[Metric, dict[Labels, float]] = {}
        for metric, labels, value in sample.local:
            local.setdefault(metric, {})[labels] = value
        cluster: dict[Metric, dict[Labels, float]] = {}
        for metric, labels, value in sample.cluster or ():
            cluster.setdefault(metric, {})[labels] = value
        with self._lock:
            self._local = local
            self._cluster = cluster  # empty when another node samples the cluster

    # ------------------------------------------------------------------ prometheus_client
    def describe(self) -> Iterator[PromMetric]:
        """The metric families, without samples (a registry checks names with it)."""
        for metric in CATALOGUE:
            yield _family(metric)

    def collect(self) -> Iterator[PromMetric]:
        """Every metric of the catalogue with its current values."""
        with self._lock:
            counters = {k: dict(v) for k, v in self._counters.items()}
            histograms = {
                k: {labels: (list(h.counts), h.count, h.sum) for labels, h in v.items()}
                for k, v in self._histograms.items()
            }
            gauges = {**self._local, **self._cluster}
        for metric in CATALOGUE:
            family = _family(metric)
            if metric.type is MetricType.HISTOGRAM:
                for labels, (counts, count, total) in sorted(histograms.get(metric, {}).items()):
                    buckets: list[tuple[str, float]] = []
                    running = 0
                    for bound, n in zip(metric.buckets, counts, strict=False):
                        running += n
                        buckets.append((_bound(bound), running))
                    buckets.append(("+Inf", count))
                    family.add_metric(list(labels), buckets, total)
            else:
                values = {**counters.get(metric, {}), **gauges.get(metric, {})}
                for labels, value in sorted(values.items()):
                    family.add_metric(list(labels), value)
            yield family


class _EventObserver:
    """Counts what only the job events tell (:meth:`RatchetCollector.install`, ``job_events``)."""

    def __init__(self, collector: RatchetCollector) -> None:
        self.collector = collector

    @hookimpl
    def ratchet_job_event(self, event: JobEvent) -> None:
        if event.kind is EventKind.CANCELLED:
            self.collector.ratchet_metrics_observed([Measurement(JOBS_CANCELED, (), 1)])


def _family(metric: Metric) -> Any:
    labels = list(metric.labels)
    if metric.type is MetricType.COUNTER:
        return CounterMetricFamily(metric.name, metric.help, labels=labels)
    if metric.type is MetricType.HISTOGRAM:
        return HistogramMetricFamily(metric.name, metric.help, labels=labels)
    return GaugeMetricFamily(metric.name, metric.help, labels=labels)


def _bound(value: float) -> str:
    return str(float(value))


class MetricsServer:
    """The HTTP endpoint :func:`serve` started; :meth:`close` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen when asked for port 0)."""
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(
    collector: RatchetCollector,
    port: int,
    address: str = DEFAULT_ADDRESS,
    *,
    registry: CollectorRegistry | None = None,
) -> MetricsServer:
    """Serve ``collector`` (in ``registry``, else a new one with the process metrics too) as
    Prometheus text on ``http://address:port/metrics`` from a daemon thread.

    :raises ConfigurationError: the port cannot be bound.
    """
    if registry is None:
        from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR

        registry = CollectorRegistry(auto_describe=True)
        for default in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            registry.register(default)
        registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on {address}:{port} ({exc}); choose another --metrics-port"
        ) from exc
    return MetricsServer(server, thread)


def serve_app(
    app: Ratchet,
    port: int,
    address: str = DEFAULT_ADDRESS,
    *,
    targets: Iterable[str] | None = None,
    max_targets: int = 100,
) -> MetricsServer:
    """Install a new :class:`RatchetCollector` in ``app`` and serve it (what
    ``ratchet worker --metrics-port`` does)."""
    collector = RatchetCollector(targets=targets, max_targets=max_targets).install(app)
    return serve(collector, port, address)
