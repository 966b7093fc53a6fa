"""``tripwire``: a throwaway module on ``sys.path`` whose top-level code records that it ran.

Tests of the class policy use it to show that a stored reference to a module the policy refuses
never imports that module.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Tripwire:
    """The module ``module``; importing it writes ``marker``."""

    module: str
    marker: Path

    @property
    def enum_ref(self) -> str:
        """The stored reference of its enum class ``Color`` (one member, ``RED = "red"``)."""
        return f"{self.module}:Color"

    @property
    def imported(self) -> bool:
        return self.marker.exists() or self.module in sys.modules


@pytest.fixture
def tripwire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tripwire]:
    folder = tmp_path / "tripwire"
    folder.mkdir()
    wire = Tripwire(f"tripwire_{uuid.uuid4().hex}", tmp_path / "tripwire-imported")
    (folder / f"{wire.module}.py").write_text(
        "import enum\n"
        "import pathlib\n\n"
        f"pathlib.Path({str(wire.marker)!r}).write_text('top-level code ran')\n\n\n"
        "class Color(enum.Enum):\n"
        "    RED = 'red'\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(folder))
    yield wire
    sys.modules.pop(wire.module, None)
