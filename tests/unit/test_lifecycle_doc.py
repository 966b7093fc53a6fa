"""docs/lifecycle.md: its Mermaid state diagram is exactly the transition table."""

from __future__ import annotations

import re
from pathlib import Path

from ratchet.domain.lifecycle import TERMINAL_STATUSES, TRANSITIONS, JobStatus

DOC = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"
BLOCK = re.compile(r"^```mermaid\n(.*?)^```", re.MULTILINE | re.DOTALL)
EDGE = re.compile(r"^(\[\*\]|[A-Z_]+)\s*-->\s*(\[\*\]|[A-Z_]+)\s*(?::\s*(.*))?$")
START = END = "[*]"


def diagram() -> list[str]:
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert len(blocks) == 1, "docs/lifecycle.md must hold exactly one mermaid block"
    lines = [line.strip() for line in blocks[0].splitlines()]
    assert lines[0] == "stateDiagram-v2"
    return [line for line in lines[1:] if line and not line.startswith("%%")]


def parse() -> tuple[list[tuple[JobStatus | None, JobStatus]], list[JobStatus]]:
    """Return (the moves in diagram order, the statuses marked terminal with ``--> [*]``)."""
    moves: list[tuple[JobStatus | None, JobStatus]] = []
    ends: list[JobStatus] = []
    for line in diagram():
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
