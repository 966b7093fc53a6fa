"""Configuration of an app and its workers, with the original's defaults where they exist."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ratchet.domain.affinity import node_tags
from ratchet.domain.breaker import check_profile_name, resolve_profiles
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.priority import DEFAULT_BOOST_INTERVAL
from ratchet.domain.resources import parse_resource_limits
from ratchet.domain.retention import RetentionSettings
from ratchet.domain.sanitize import DEFAULT_SECRET_KEYS, SanitizePolicy
from ratchet.domain.text import is_storable_text
from ratchet.domain.timeouts import TimeoutSettings
from ratchet.domain.watcher import WatcherSettings


@dataclass
class RatchetConfig:
    """Settings shared by the scheduler API and the workers of one app."""

    allowed_modules: tuple[str, ...] = ()
    """Module prefixes whose callables may be jobs (the class policy). Empty denies all; a single
    string is one prefix (``"myapp"``, not the letters m, y, a, p, p)."""
    allow_empty_class_policy: bool = False
    """Start even without a class policy (every job is then refused)."""
    max_payload_bytes: int = 100_000
    max_result_bytes: int = 65_536
    boost_interval: timedelta = DEFAULT_BOOST_INTERVAL
    """Age boost: +1 effective priority per interval waited; zero disables."""
    node_name: str | None = None
    extra: dict[str, object] = field(default_factory=dict)
    circuit_breakers: bool = True
    """Guard job targets with circuit breakers (False: the pass-through strategy)."""
    breaker_profiles: Mapping[str, Any] = field(default_factory=dict)
    """Numbers of the built-in profiles, e.g. ``{"FAST": {"wait": 5}}`` (docs/circuit-breakers.md)."""
    default_breaker_profile: str = "DEFAULT"
    """The profile of targets without ``@circuit_breaker(profile=...)``."""
    resource_limits: Mapping[str, Any] = field(default_factory=dict)
    """``{name: (max_concurrent, retry_delay)}`` stored when the app starts (docs/resource-limits.md)."""
    tracing: str | None = None
    """The tracer to use: ``"otel"`` for OpenTelemetry (needs ``ratchet-core[otel]``), a name a
    tracing plugin answers to, or None for no tracing (docs/observability.md)."""
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    """Retention of ended jobs, dead letters and job logs (docs/retention.md)."""
    sanitize_keys: tuple[str, ...] = DEFAULT_SECRET_KEYS
    """Key names whose values the built-in error sanitiser redacts (``password=...``)."""
    sanitize_urls: bool = True
    """Redact the user and password of URLs in errors and tracebacks."""
    sanitize_emails: bool = True
    """Redact e-mail addresses in errors and tracebacks."""
    pause_gc_in_bulk: bool = True
    """Pause Python's automatic cyclic garbage collection while a submission of 100 jobs or
    more runs (docs/performance.md); False leaves the collector alone."""

    def sanitize_policy(self) -> SanitizePolicy:
        """The built-in error sanitiser's policy from these settings."""
        return SanitizePolicy(
            keys=tuple(self.sanitize_keys), urls=self.sanitize_urls, emails=self.sanitize_emails
        )

    def __post_init__(self) -> None:
        if isinstance(self.allowed_modules, str):
            self.allowed_modules = (self.allowed_modules,)
        self.allowed_modules = tuple(self.allowed_modules)
        for prefix in self.allowed_modules:
            if not isinstance(prefix, str):
                raise ConfigurationError(
                    f"allowed_modules must be module prefixes (strings), got {prefix!r}"
                )
        if self.max_payload_bytes <= 0 or self.max_result_bytes <= 0:
            raise ConfigurationError("payload and result caps must be positive byte counts")
        if self.boost_interval < timedelta(0):
            raise ConfigurationError("boost_interval must not be negative")
        if self.node_name is not None and not (
            self.node_name and len(self.node_name) <= 60 and is_storable_text(self.node_name)
        ):
            raise ConfigurationError(
                f"node_name {self.node_name!r} cannot name a node: use 1 to 60 characters "
                "without NUL or lone surrogates"
            )
        resolve_profiles(self.breaker_profiles)
        check_profile_name(self.default_breaker_profile)
        parse_resource_limits(self.resource_limits)
        if not isinstance(self.retention, RetentionSettings):
            raise ConfigurationError(
                f"retention must be a ratchet.RetentionSettings, got {type(self.retention).__name__}"
            )
        if isinstance(self.sanitize_keys, str):
            self.sanitize_keys = (self.sanitize_keys,)
        self.sanitize_policy()  # validates the sanitiser's settings


@dataclass
class WorkerConfig:
    """Settings of one worker process."""

    concurrency: int = 64
    """Job slots (threads of the default executor): at most this many of the worker's jobs run
    at once. As many finished runs again may wait for their outcome to be written (the jobs are
    still RUNNING in the store until then) while the next claim goes ahead; past that they hold
    their slots. While runs end fast, the worker also claims ahead of its threads
    (``claim_ahead``), so short jobs get large claims and outcome batches without more threads;
    threads are started only as jobs need them. Set it to what may really run at once when jobs
    block for long."""
    batch_size: int = 200
    """Most jobs claimed per poll (never more than the free slots)."""
    claim_ahead: timedelta = timedelta(milliseconds=50)
    """How long, on average, jobs claimed beyond the worker's threads may wait for one. A
    worker whose runs end fast holds up to as many more jobs than ``concurrency`` as its
    threads get through in this time (at most 500), so its claims and outcome writes carry
    more jobs each; jobs that run long get none ahead. At most ``concurrency`` run at once
    either way. Zero: never more claimed than ``concurrency`` (docs/polling.md)."""
    heartbeat_interval: timedelta = timedelta(seconds=10)
    orphan_grace: timedelta = timedelta(seconds=30)
    """A node silent this long is marked DEAD (the watcher's Dn); its jobs are taken over."""
    orphan_scan_interval: timedelta = timedelta(seconds=60)
    summary_interval: timedelta = timedelta(seconds=60)
    """How often the worker logs what it did and what waits (zero: never)."""
    metrics_interval: timedelta = timedelta(seconds=10)
    """How often the worker samples its gauges for the metrics hooks (only while a plugin
    implements ``ratchet_metrics_sampled``); the cluster's sampling lease lasts three times it."""
    recurring_interval: timedelta = timedelta(seconds=1)
    """How often the worker creates the due occurrences of recurring masters."""
    recurring_batch_limit: int = 20
    """Recurring masters claimed per materializer transaction."""
    drain_timeout: timedelta = timedelta(seconds=30)
    """How long SIGTERM waits for running jobs before handing them back."""
    completion_batch: int = 256
    """Most attempt outcomes written in one transaction."""
    hint_spread: timedelta = timedelta(milliseconds=20)
    """How far apart the nodes of a cluster claim for another process's wakeup hint, per other
    live node (at most 50 times it): the first claims after about this long, and the others
    skip their claim when it reports the jobs taken. Zero: every node claims at once."""
    burst_delay: timedelta = timedelta(milliseconds=500)
    min_delay: timedelta = timedelta(seconds=2)
    max_delay: timedelta = timedelta(seconds=30)
    deep_idle_delay: timedelta = timedelta(seconds=60)
    deep_idle_after: timedelta = timedelta(minutes=5)
    default_sla: timedelta = timedelta(minutes=30)
    """Timeout of an attempt whose job has none (the watchdog interrupts it then)."""
    soft_timeout_percent: int = 80
    """A warning is logged at this percentage of an attempt's timeout (1..99)."""
    cancellation_grace: timedelta = timedelta(0)
    """The cancellation request is set this long before the deadline (0: only at the deadline)."""
    zombie_grace: timedelta = timedelta(seconds=1)
    """A call still running this long after its deadline interrupt counts as a zombie."""
    cancel_request_interval: timedelta = timedelta(seconds=1)
    """How often a busy worker reads ``cancel_job(id, interrupt=True)`` requests for its jobs."""
    # -- liveness and the stalled-job watcher (docs/clustering.md) ------------------------------
    watcher_enabled: bool = True
    """Run the watcher on this node (every node runs it; passes are idempotent)."""
    watcher_interval: timedelta = timedelta(seconds=5)
    """Time between watcher passes (with +-20 % jitter); keep it <= min(D1, D2) / 4."""
    queued_stall: timedelta = timedelta(seconds=60)
    """D_q: a reserved (QUEUED) job not started this long goes back to PENDING."""
    running_stall: timedelta = timedelta(seconds=60)
    """D1: a RUNNING job that reports progress and made none this long becomes TIMED_OUT."""
    timed_out_grace: timedelta = timedelta(seconds=60)
    """D2: only the owner may revive a TIMED_OUT job this long; then others may take it over."""
    takeover_window: timedelta = timedelta(seconds=120)
    """D3: a takeover-eligible job nobody takes within this fails through its retry policy."""
    max_takeovers: int = 3
    """A job that stalls again after this many takeovers fails through its retry policy."""
    prefetch: int = 0
    """Jobs reserved (QUEUED) beyond the free slots, started as slots free up (0: none)."""
    tags: frozenset[str] = frozenset()
    """Node tags (``--tags gpu,eu``): the worker claims only jobs whose required tags it has
    all of and whose excluded tags it has none of (docs/affinity-and-limits.md). A string is
    split at commas."""

    def __post_init__(self) -> None:
        self.tags = node_tags(self.tags)
        if self.concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.batch_size < 1:
            raise ConfigurationError(f"batch_size must be at least 1, got {self.batch_size}")
        self.timeout_settings()  # validates the watchdog settings
        self.watcher_settings()  # validates the watcher's deadlines
        if self.prefetch < 0:
            raise ConfigurationError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.metrics_interval <= timedelta(0):
            raise ConfigurationError("metrics_interval must be positive")
        if self.claim_ahead < timedelta(0):
            raise ConfigurationError(f"claim_ahead must not be negative, got {self.claim_ahead}")
        if self.hint_spread < timedelta(0):
            raise ConfigurationError(f"hint_spread must not be negative, got {self.hint_spread}")
        if self.watcher_interval <= timedelta(0):
            raise ConfigurationError("watcher_interval must be positive")
        if self.orphan_grace < 3 * self.heartbeat_interval:
            raise ConfigurationError(
                f"orphan_grace ({self.orphan_grace}) must be at least 3 x heartbeat_interval "
                f"({self.heartbeat_interval}): with less, one slow or lost heartbeat gets a live "
                "node declared dead and its jobs taken over"
            )
        if self.watcher_enabled and self.watcher_interval * 4 > min(
            self.running_stall, self.timed_out_grace
        ):
            raise ConfigurationError(
                f"watcher_interval ({self.watcher_interval}) must be at most "
                "min(running_stall, timed_out_grace) / 4, or stalls are noticed late; lower it "
                "or raise the deadlines"
            )

    def watcher_settings(self) -> WatcherSettings:
        """The watcher's deadlines and caps (``orphan_grace`` is its node-death deadline Dn).

        :raises ConfigurationError: a value is out of range.
        """
        return WatcherSettings(
            queued_stall=self.queued_stall,
            running_stall=self.running_stall,
            timed_out_grace=self.timed_out_grace,
            takeover_window=self.takeover_window,
            max_takeovers=self.max_takeovers,
            dead_after=self.orphan_grace,
        )

    def timeout_settings(self) -> TimeoutSettings:
        """The watchdog's settings.

        :raises ConfigurationError: a value is out of range.
        """
        return TimeoutSettings(
            default_sla=self.default_sla,
            soft_timeout_percent=self.soft_timeout_percent,
            cancellation_grace=self.cancellation_grace,
        )
