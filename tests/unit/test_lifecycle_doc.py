"""The state diagrams of the docs against the transition table.

docs/lifecycle.md draws every move: its diagram is exactly ``TRANSITIONS``. docs/clustering.md
draws the watcher's view: each of its arrows is a move the table allows (or a status kept, such
as progress), and every move into or out of TIMED_OUT is there.
"""

from __future__ import annotations

import re
from pathlib import Path

from ratchet.domain.lifecycle import TERMINAL_STATUSES, TRANSITIONS, JobStatus

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC = DOCS / "lifecycle.md"
BLOCK = re.compile(r"^```mermaid\n(.*?)^```", re.MULTILINE | re.DOTALL)
EDGE = re.compile(r"^(\[\*\]|[A-Z_]+)\s*-->\s*(\[\*\]|[A-Z_]+)\s*(?::\s*(.*))?$")
START = END = "[*]"


def diagram(doc: Path = DOC) -> list[str]:
    blocks = BLOCK.findall(doc.read_text(encoding="utf-8"))
    states = [b for b in blocks if b.lstrip().startswith("stateDiagram")]
    assert len(states) == 1, f"docs/{doc.name} must hold exactly one mermaid state diagram"
    lines = [line.strip() for line in states[0].splitlines()]
    assert lines[0] == "stateDiagram-v2"
    return [line for line in lines[1:] if line and not line.startswith("%%")]


def parse(doc: Path = DOC) -> tuple[list[tuple[JobStatus | None, JobStatus]], list[JobStatus]]:
    """Return (the moves in diagram order, the statuses marked terminal with ``--> [*]``)."""
    moves: list[tuple[JobStatus | None, JobStatus]] = []
    ends: list[JobStatus] = []
    for line in diagram(doc):
        match = EDGE.match(line)
        assert match, f"not an edge: {line!r}"
        source, target = match.group(1), match.group(2)
        assert target != START or source != START, line
        if target == END:
            assert source != START and not match.group(3), line
            ends.append(JobStatus(source))
        else:
            moves.append((None if source == START else JobStatus(source), JobStatus(target)))
    return moves, ends


def test_diagram_edges_are_exactly_the_transitions() -> None:
    moves, _ = parse()
    assert len(moves) == len(set(moves)), "an edge is drawn twice"
    assert set(moves) == TRANSITIONS


def test_diagram_marks_exactly_the_terminal_statuses() -> None:
    _, ends = parse()
    assert len(ends) == len(set(ends))
    assert set(ends) == TERMINAL_STATUSES


def test_every_move_has_a_label() -> None:
    for line in diagram():
        match = EDGE.match(line)
        assert match
        if match.group(2) != END:
            assert match.group(3), f"unlabelled edge: {line!r}"


def test_the_watcher_diagram_draws_only_allowed_moves() -> None:
    moves, ends = parse(DOCS / "clustering.md")
    assert not ends
    changes = {(source, target) for source, target in moves if source is not target}
    assert changes <= TRANSITIONS, f"moves the table refuses: {changes - TRANSITIONS}"
    timed_out = {m for m in TRANSITIONS if JobStatus.TIMED_OUT in m}
    assert timed_out <= changes, f"TIMED_OUT moves not drawn: {timed_out - changes}"


def test_nobody_took_it_over_goes_through_the_retry_policy_in_both_diagrams() -> None:
    """T9: PENDING while a retry remains, FAILED (the DLQ) when none does."""
    for doc in (DOC, DOCS / "clustering.md"):
        labels = {
            (m.group(1), m.group(2)): m.group(3) or ""
            for m in map(EDGE.match, diagram(doc))
            if m is not None
        }
        retry = labels[("TIMED_OUT", "PENDING")]
        dead = labels[("TIMED_OUT", "FAILED")]
        assert "nobody took it" in retry and "retry remains" in retry, (doc.name, retry)
        assert "nobody took it" in dead and "no retry" in dead, (doc.name, dead)
