"""What each page shows, read through Ratchet's public APIs (blocking; run off the loop).

No page counts a whole table: the overview reads :meth:`ratchet.engine.jobs_api.Jobs.health`
(the live queue's counts, index range counts of the jobs that ended in the last minute and of
the dead-letter queue), listings are keyset pages, and the DLQ groups the newest dead letters.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from markupsafe import Markup

from ratchet import Ratchet
from ratchet.domain.errors import JobNotFound
from ratchet.domain.lifecycle import TERMINAL_STATUSES, JobStatus
from ratchet.domain.model import JobRecord
from ratchet.domain.query import InvalidQuery, JobLink, JobQuery
from ratchet.domain.retention import DeadLetterFilter
from ratchet_dashboard.charts import (
    GraphNode,
    Sample,
    Throughput,
    bars,
    flow_graph,
    line_chart,
    timeline,
)

#: How many of the newest dead letters the DLQ page groups.
DLQ_GROUPED = 500
#: The largest set of dependants drawn as a graph.
GRAPH_LIMIT = 12
#: How many levels of dependants the graph follows (one links query per level).
GRAPH_DEPTH = 12
#: A RUNNING job whose node's heartbeat is older than this counts as stalled on the cluster page.
STALE_HEARTBEAT = timedelta(seconds=60)
#: The live statuses, in lifecycle order (the overview's counts).
LIVE = [
    JobStatus.PENDING,
    JobStatus.QUEUED,
    JobStatus.RUNNING,
    JobStatus.TIMED_OUT,
    JobStatus.WAITING,
    JobStatus.PAUSED,
]
ALL_STATUSES = [s.value for s in JobStatus]
#: How many held jobs the cluster page reads (by node, then id).
RUNNING_SHOWN = 200
#: How many of them the cluster page looks at for an abandoned earlier run.
TAKEOVER_CHECKED = 25
#: How many of them it lists under each node.
HELD_PER_NODE = 10
#: Attempt outcome of a run whose node was declared dead and whose job another node took.
ABANDONED = "ABANDONED"


class BadRequest(ValueError):
    """A filter or parameter the page cannot use; its message is shown to the user."""


def age(now: datetime, then: datetime | None) -> str:
    """``now - then`` as a short human duration ("-" for None)."""
    if then is None:
        return "-"
    seconds = (now - then).total_seconds()
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.1f}s"
    if seconds < 3600:
        return f"{sign}{seconds / 60:.1f}m"
    if seconds < 86400 * 2:
        return f"{sign}{seconds / 3600:.1f}h"
    return f"{sign}{seconds / 86400:.1f}d"


def pretty_json(text: str | None) -> str:
    """Stored JSON text indented for reading (as stored when it is not JSON)."""
    if text is None:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def overview(app: Ratchet, throughput: Throughput) -> dict[str, Any]:
    """Queue health now, the throughput samples and the nodes at a glance."""
    throughput.load_history(lambda window: app.jobs.health(window=window))
    health = app.jobs.health(window=timedelta(minutes=1))
    throughput.add(Sample(health.at, health.succeeded_in_window, health.failed_in_window))
    samples = throughput.samples()
    counts = [(s.value, int(health.live.get(s.value, 0))) for s in LIVE]
    counts.append(("FAILED", health.failed))
    nodes = app.store.list_nodes()
    return {
        "health": health,
        "counts": counts,
        "counts_chart": bars(counts),
        "chart": line_chart(samples, title="Jobs ended per minute: succeeded and failed"),
        "samples": len(samples),
        "oldest": age(health.at, health.oldest_due) if health.oldest_due else "-",
        "nodes": [
            {
                "node": n,
                "age": age(health.at, n.heartbeat_at),
                "running": health.running_by_node.get(n.node_id, 0),
            }
            for n in nodes
        ],
        "now": health.at,
    }


def _instant(text: str, name: str) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{name}: {text!r} is not a date and time (YYYY-MM-DDTHH:MM)") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def parse_job_filters(
    params: Mapping[str, str], statuses: list[str]
) -> tuple[JobQuery, dict[str, Any]]:
    """The jobs page's query from its URL parameters, and the values to show in the form.

    :raises BadRequest: a value the query API refuses (its message says why).
    """
    text = {
        name: params.get(name, "").strip()
        for name in (
            "target",
            "tag",
            "business_key",
            "created_after",
            "created_before",
            "finished_after",
            "finished_before",
        )
    }
    form: dict[str, Any] = {"status": [s.upper() for s in statuses if s], **text}
    try:
        query = JobQuery(
            statuses=tuple(JobStatus(s) for s in form["status"]),
            target=text["target"] or None,
            tag=text["tag"].lower() or None,
            business_key=text["business_key"] or None,
            created_after=_instant(text["created_after"], "created after"),
            created_before=_instant(text["created_before"], "created before"),
            finished_after=_instant(text["finished_after"], "ended after"),
            finished_before=_instant(text["finished_before"], "ended before"),
        )
    except ValueError as exc:  # InvalidQuery, or an unknown status
        raise BadRequest(str(exc)) from None
    return query, form


def jobs_page(app: Ratchet, query: JobQuery, cursor: str | None, limit: int) -> dict[str, Any]:
    """One keyset page of the jobs matching ``query``."""
    try:
        page = app.jobs.list(query, cursor=cursor or None, limit=limit)
    except InvalidQuery as exc:
        raise BadRequest(str(exc)) from None
    return {"jobs": list(page.items), "next_cursor": page.next_cursor}


def parse_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise BadRequest(f"{text.strip()[:80]!r} is not a job id (a UUID)") from None


def job_actions(job: JobRecord) -> list[str]:
    """The operator actions that apply to ``job`` in its status now."""
    actions = []
    if job.status is JobStatus.FAILED:
        actions.append("retry")
    if job.status in (JobStatus.PENDING, JobStatus.QUEUED):
        actions.append("pause")
    if job.status is JobStatus.PAUSED:
        actions.append("resume")
    if job.status not in TERMINAL_STATUSES:
        actions.append("cancel")
    return actions


def condition_text(link: JobLink) -> str:
    """How a branch's condition reads on a page (empty for a chain step)."""
    if link.condition is None:
        return ""
    text = f"on {link.condition.type.value}"
    if link.condition.expression is not None:
        text += f" {link.condition.expression}"
    return text


def dependants_graph(
    job: JobRecord,
    dependants: list[JobRecord],
    links: list[JobLink],
    href: Callable[[str], str],
) -> Markup:
    """``job`` and the jobs waiting on it as a tree, each under the job it waits for and
    labelled with its branch condition (empty when there are none or too many)."""
    if not dependants or len(dependants) > GRAPH_LIMIT:
        return Markup("")
    parent_of = {link.child_id: link for link in links}

    def node(rec: JobRecord, root: bool) -> GraphNode:
        name = rec.target.rpartition(":")[2]
        link = None if root else parent_of.get(rec.job_id)
        condition = "" if link is None else condition_text(link)
        return GraphNode(
            str(rec.job_id),
            f"{name} {str(rec.job_id)[-6:]}" + (f" ({condition})" if condition else ""),
            rec.status.value,
            None if link is None else str(link.parent_id),
            href(f"/jobs/{rec.job_id}"),
        )

    drawn = [d for d in dependants if d.job_id in parent_of]
    return flow_graph([node(job, True), *(node(d, False) for d in drawn)])


def job_page(
    app: Ratchet, job_id: uuid.UUID, href: Callable[[str], str] = lambda path: path
) -> dict[str, Any] | None:
    """One job as ``jobs show`` shows it (masked), its attempts, log and flow; None if unknown."""
    try:
        history = app.jobs.history(job_id)
    except JobNotFound:
        return None
    job = history.job
    now = app.now()
    attempts = [
        {
            "a": a,
            "duration": "-"
            if a.finished_at is None
            else f"{(a.finished_at - a.started_at).total_seconds():.3f}s",
        }
        for a in history.attempts
    ]
    dependants = app.jobs.dependants(job_id, limit=100)
    links = app.jobs.links(job_id, depth=GRAPH_DEPTH, limit=200)
    waits_for = next((link for link in links if link.child_id == job_id), None)
    batch = app.get_batch(job_id)
    children = app.jobs.batch_children(job_id, limit=50).items if batch is not None else ()
    return {
        "job": job,
        "payload": pretty_json(job.payload),
        "result": pretty_json(job.result),
        "attempts": attempts,
        "timeline": timeline(
            [
                (f"#{a.attempt} e{a.epoch}", a.started_at, a.finished_at, a.outcome)
                for a in history.attempts
            ],
            now,
        ),
        "logs": app.retention.job_logs(job_id, limit=1000),
        "dependants": dependants,
        "graph": dependants_graph(job, dependants, links, href),
        "waits_for": waits_for,
        "waits_for_condition": "" if waits_for is None else condition_text(waits_for),
        "batch": batch,
        "children": list(children),
        "actions": job_actions(job),
        "now": now,
    }


def error_class(error: str | None) -> str:
    """The exception class of a stored error text (``Class: message``)."""
    if not error:
        return "(no error)"
    head = error.split(":", 1)[0].strip()
    return head if head and " " not in head else "(unclassified)"


@dataclass
class DeadLetterGroup:
    error_class: str
    target: str
    count: int
    newest: JobRecord


def dlq_page(app: Ratchet) -> dict[str, Any]:
    """The newest dead letters grouped by error class and target, and the DLQ's size."""
    page = app.dlq.list(limit=DLQ_GROUPED)
    groups: dict[tuple[str, str], DeadLetterGroup] = {}
    for job in page.jobs:
        key = (error_class(job.last_error), job.target)
        if key in groups:
            groups[key].count += 1
        else:
            groups[key] = DeadLetterGroup(key[0], key[1], 1, job)
    return {
        "groups": sorted(groups.values(), key=lambda g: (-g.count, g.error_class, g.target)),
        "jobs": page.jobs[:50],
        "total": app.dlq.count(),
        "grouped": len(page.jobs),
        "more": page.next is not None,
    }


def dlq_filter(error: str, target: str) -> DeadLetterFilter:
    """The dead letters of one group: its target, errors starting with its class."""
    text = error.strip()
    try:
        return DeadLetterFilter(
            target=target.strip() or None,
            error_contains=f"{text}:" if text and not text.startswith("(") else None,
        )
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def recurring_page(app: Ratchet) -> dict[str, Any]:
    """Every master with its next fire times (UTC offset changes marked) and latest runs."""
    from ratchet.cron import next_fire_times

    now = app.now()
    masters = []
    for master in app.list_recurring(active_only=False, limit=200):
        fires: list[dict[str, Any]] = []
        error = None
        if master.is_active:
            try:
                times = next_fire_times(master.cron, master.zone, now, 5, now=now)
            except ValueError as exc:
                times, error = [], str(exc)
            previous = now.astimezone(times[0].tzinfo).utcoffset() if times else None
            for fire in times:
                offset = fire.utcoffset()
                fires.append({"at": fire, "dst": offset != previous})
                previous = offset
        runs = app.jobs.list(recurring_master_id=master.recurring_id, limit=5).items
        misfire = master.misfire.kind.value
        if master.misfire.kind.value.upper() == "CATCH_UP":
            misfire += f" (at most {master.misfire.max_catch_up})"
        masters.append(
            {"m": master, "fires": fires, "error": error, "runs": runs, "misfire": misfire}
        )
    return {"masters": masters, "now": now}


def cluster_page(app: Ratchet) -> dict[str, Any]:
    """Nodes, what they hold, the watcher's view, resource permits and breakers."""
    from ratchet.ports import BreakerStates

    now = app.now()
    nodes = app.store.list_nodes()
    fresh = {
        n.node_id
        for n in nodes
        if n.state in ("ALIVE", "DRAINING") and now - n.heartbeat_at <= STALE_HEARTBEAT
    }
    running = app.jobs.running(limit=RUNNING_SHOWN)
    held: dict[str, list[Any]] = {}
    for r in running:
        held.setdefault(r.node_id, []).append(r)
    stalled = [r for r in running if r.node_id not in fresh]
    timed_out = app.jobs.list(status=JobStatus.TIMED_OUT, limit=50).items
    # Taken over: a held job one of whose runs a dead node abandoned (the first few looked at).
    taken: list[dict[str, Any]] = []
    for r in running[:TAKEOVER_CHECKED]:
        abandoned = [a for a in app.attempts(r.job_id) if a.outcome == ABANDONED]
        if abandoned:
            taken.append({"job": r, "from": abandoned[-1]})
    # Each live node's breakers as it published them with its last heartbeat, then this
    # process's own (a dashboard mounted in a worker, or one that runs jobs inline).
    breakers: list[dict[str, str | None]] = [
        {"where": n.node_name or n.node_id, "node_id": n.node_id, "service": name, "state": state}
        for n in nodes
        if n.state in ("ALIVE", "DRAINING")
        for name, state in sorted(n.breakers.items())
    ]
    if isinstance(app.resilience, BreakerStates):
        breakers += [
            {"where": "this process", "node_id": None, "service": name, "state": state.value}
            for name, state in sorted(app.resilience.states().items())
        ]
    return {
        "nodes": [
            {
                "node": n,
                "age": age(now, n.heartbeat_at),
                "jobs": held.get(n.node_id, [])[:HELD_PER_NODE],
                "more": max(len(held.get(n.node_id, [])) - HELD_PER_NODE, 0),
            }
            for n in nodes
        ],
        "running": running,
        "running_capped": len(running) == RUNNING_SHOWN,
        "stalled": stalled[:50],
        "stalled_more": max(len(stalled) - 50, 0),
        "timed_out": timed_out,
        "taken": taken,
        "limits": app.resource_limits(),
        "permits": app.permits(),
        "type_limits": app.type_limits(),
        "breakers": breakers,
        "now": now,
        "stale": STALE_HEARTBEAT,
    }
