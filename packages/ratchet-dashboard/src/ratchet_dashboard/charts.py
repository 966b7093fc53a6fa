"""Small inline SVG charts (no script, no external library)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

#: One sample a minute would need an hour to fill; samples closer than this are merged.
MIN_SPACING = timedelta(seconds=10)


@dataclass(frozen=True)
class Sample:
    """Jobs that ended in the minute before ``at``."""

    at: datetime
    succeeded: int
    failed: int


class Throughput:
    """The dashboard's own record of queue health samples (newest last), at most ``size``.

    Each overview render adds one, so the chart covers the time the dashboard has been watched;
    nothing is stored in the database for it.
    """

    def __init__(self, size: int = 360) -> None:
        self._samples: deque[Sample] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, sample: Sample) -> None:
        with self._lock:
            if self._samples and sample.at - self._samples[-1].at < MIN_SPACING:
                self._samples[-1] = sample
            else:
                self._samples.append(sample)

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)


def line_chart(
    samples: Sequence[Sample], *, width: int = 640, height: int = 160, title: str = ""
) -> Markup:
    """Succeeded and failed jobs per minute over the samples' time, as an ``<svg>`` element."""
    pad_left, pad_bottom, pad_top = 40, 20, 10
    inner_w, inner_h = width - pad_left - 10, height - pad_bottom - pad_top
    peak = max([1, *(max(s.succeeded, s.failed) for s in samples)])
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<line x1="{pad_left}" y1="{pad_top + inner_h}" x2="{pad_left + inner_w}" '
        f'y2="{pad_top + inner_h}" class="axis"/>',
        f'<text x="{pad_left - 4}" y="{pad_top + 8}" text-anchor="end" class="tick">{peak}</text>',
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

        def points(values: Sequence[int]) -> str:
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
