"""Small inline SVG charts (no script, no external library)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from ratchet.domain.query import QueueHealth

log = logging.getLogger("ratchet.dashboard")

#: Samples closer than this are merged (the overview refreshes every few seconds).
MIN_SPACING = timedelta(seconds=10)
#: The history loaded at start: this many buckets of this width before now.
HISTORY_BUCKETS = 12
HISTORY_WIDTH = timedelta(minutes=5)


@dataclass(frozen=True)
class Sample:
    """Jobs that ended per minute just before ``at`` (an average over longer history buckets)."""

    at: datetime
    succeeded: float
    failed: float


class Throughput:
    """The dashboard's record of how many jobs ended per minute (oldest first), at most ``size``.

    Each overview render adds a sample of the minute before it. The hour before the dashboard
    started is filled in once, in the background (:meth:`load_history`), from queue health
    windows; nothing is stored in the database for the chart.
    """

    def __init__(self, size: int = 400) -> None:
        self._samples: deque[Sample] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._history_started = False
        self.history_loaded = threading.Event()
        """Set once :meth:`load_history` finished (or gave up)."""

    def add(self, sample: Sample) -> None:
        with self._lock:
            if self._samples and sample.at - self._samples[-1].at < MIN_SPACING:
                self._samples[-1] = sample
            else:
                self._samples.append(sample)

    def load_history(
        self,
        health: Callable[[timedelta], QueueHealth],
        *,
        buckets: int = HISTORY_BUCKETS,
        width: timedelta = HISTORY_WIDTH,
    ) -> None:
        """Start filling in the ``buckets`` x ``width`` before now, once, in a thread.

        ``health(window)`` is :meth:`ratchet.engine.jobs_api.Jobs.health`: window ``k`` x
        ``width`` minus window ``k - 1`` x ``width`` is what ended in bucket ``k``.
        """
        with self._lock:
            if self._history_started:
                return
            self._history_started = True
        threading.Thread(
            target=self._history,
            args=(health, buckets, width),
            name="ratchet-dashboard-history",
            daemon=True,
        ).start()

    def _history(
        self, health: Callable[[timedelta], QueueHealth], buckets: int, width: timedelta
    ) -> None:
        try:
            totals = [health(width * k) for k in range(1, buckets + 1)]
        except Exception as exc:  # the chart then starts from the live samples alone
            log.warning("the dashboard could not read the throughput history: %s", exc)
            self.history_loaded.set()
            return
        per_minute = width / timedelta(minutes=1)
        history = []
        previous_ok = previous_failed = 0
        for k, h in enumerate(totals):
            ok = max(h.succeeded_in_window - previous_ok, 0)
            failed = max(h.failed_in_window - previous_failed, 0)
            previous_ok, previous_failed = h.succeeded_in_window, h.failed_in_window
            at = totals[0].at - width * k
            history.append(Sample(at, ok / per_minute, failed / per_minute))
        with self._lock:
            live = list(self._samples)
            first = live[0].at if live else None
            older = [s for s in reversed(history) if first is None or s.at < first - MIN_SPACING]
            self._samples.clear()
            self._samples.extend([*older, *live][-(self._samples.maxlen or 0) :])
        self.history_loaded.set()

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)


def line_chart(
    samples: Sequence[Sample], *, width: int = 640, height: int = 160, title: str = ""
) -> Markup:
    """Succeeded and failed jobs per minute over the samples' time, as an ``<svg>`` element."""
    pad_left, pad_bottom, pad_top = 40, 20, 10
    inner_w, inner_h = width - pad_left - 10, height - pad_bottom - pad_top
    peak = max([1.0, *(max(s.succeeded, s.failed) for s in samples)])
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<line x1="{pad_left}" y1="{pad_top + inner_h}" x2="{pad_left + inner_w}" '
        f'y2="{pad_top + inner_h}" class="axis"/>',
        f'<text x="{pad_left - 4}" y="{pad_top + 8}" text-anchor="end" class="tick">{peak:.3g}</text>',
        f'<text x="{pad_left - 4}" y="{pad_top + inner_h}" text-anchor="end" class="tick">0</text>',
    ]
    if len(samples) < 2:
        parts.append(
            f'<text x="{pad_left + inner_w / 2}" y="{pad_top + inner_h / 2}" '
            'text-anchor="middle" class="tick">collecting samples…</text>'
        )
    else:
        start, end = samples[0].at, samples[-1].at
        span = max((end - start).total_seconds(), 1.0)

        def points(values: Sequence[float]) -> str:
            return " ".join(
                f"{pad_left + inner_w * (s.at - start).total_seconds() / span:.1f},"
                f"{pad_top + inner_h * (1 - v / peak):.1f}"
                for s, v in zip(samples, values, strict=True)
            )

        parts.append(
            f'<polyline class="ok" fill="none" points="{points([s.succeeded for s in samples])}"/>'
        )
        parts.append(
            f'<polyline class="bad" fill="none" points="{points([s.failed for s in samples])}"/>'
        )
        parts.append(
            f'<text x="{pad_left}" y="{height - 4}" class="tick">{start:%H:%M:%S}</text>'
            f'<text x="{pad_left + inner_w}" y="{height - 4}" text-anchor="end" class="tick">'
            f"{end:%H:%M:%S} UTC</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def bars(counts: Sequence[tuple[str, int]], *, width: int = 320, row: int = 18) -> Markup:
    """Horizontal bars of ``(label, count)`` pairs, as an ``<svg>`` element."""
    peak = max([1, *(n for _, n in counts)])
    height = row * max(len(counts), 1) + 4
    parts = [
        f'<svg class="bars" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (label, n) in enumerate(counts):
        y = i * row + 2
        w = (width - 170) * n / peak
        parts.append(
            f'<text x="0" y="{y + 12}" class="tick">{escape(label)}</text>'
            f'<rect x="100" y="{y}" width="{w:.1f}" height="{row - 4}" '
            f'class="bar s-{escape(label.lower())}"/>'
            f'<text x="{104 + w:.1f}" y="{y + 12}" class="tick">{n}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def timeline(
    spans: Sequence[tuple[str, datetime, datetime | None, str]],
    now: datetime,
    *,
    width: int = 640,
    row: int = 20,
) -> Markup:
    """Attempts as bars on one time axis: ``(label, start, end or None if running, outcome)``."""
    if not spans:
        return Markup("")
    start = min(s[1] for s in spans)
    end = max((s[2] or now) for s in spans)
    total = max((end - start).total_seconds(), 0.001)
    inner = width - 110
    height = row * len(spans) + 4
    parts = [
        f'<svg class="timeline" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (label, began, ended, outcome) in enumerate(spans):
        x = 100 + inner * (began - start).total_seconds() / total
        w = max(inner * ((ended or now) - began).total_seconds() / total, 2)
        y = i * row + 2
        parts.append(
            f'<text x="0" y="{y + 13}" class="tick">{escape(label)}</text>'
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 4}" '
            f'class="bar o-{escape(outcome.lower())}"><title>{escape(outcome)}</title></rect>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True)
class GraphNode:
    """One job of a flow graph: its id, label, status and the job it waits on (None: the root)."""

    job_id: str
    label: str
    status: str
    parent: str | None
    href: str


def flow_graph(nodes: Sequence[GraphNode], *, box: int = 170, row: int = 30) -> Markup:
    """A tree of jobs, left to right: each job after the one it waits on, as an ``<svg>``."""
    children: dict[str | None, list[GraphNode]] = {}
    for node in nodes:
        children.setdefault(node.parent, []).append(node)
    placed: dict[str, tuple[int, int]] = {}
    order: list[GraphNode] = []

    def visit(node: GraphNode, depth: int) -> None:
        placed[node.job_id] = (depth, len(order))
        order.append(node)
        for child in children.get(node.job_id, []):
            visit(child, depth + 1)

    for root in children.get(None, []):
        visit(root, 0)
    if not order:
        return Markup("")
    width = (max(d for d, _ in placed.values()) + 1) * box
    height = len(order) * row + 4
    parts = [
        f'<svg class="flow" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for node in order:
        if node.parent in placed:
            (pd, pr), (d, r) = placed[node.parent], placed[node.job_id]
            parts.append(
                f'<path class="edge" fill="none" d="M{pd * box + box - 20} {pr * row + 14} '
                f"C{d * box - 10} {pr * row + 14}, {d * box - 10} {r * row + 14}, "
                f'{d * box} {r * row + 14}"/>'
            )
    for node in order:
        depth, index = placed[node.job_id]
        x, y = depth * box, index * row + 2
        parts.append(
            f'<a href="{escape(node.href)}"><rect x="{x}" y="{y}" width="{box - 20}" '
            f'height="{row - 6}" rx="4" class="node s-{escape(node.status.lower())}"/>'
            f'<text x="{x + 6}" y="{y + 16}" class="label">{escape(node.label[:24])}</text>'
            f"<title>{escape(node.job_id)} {escape(node.status)}</title></a>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
