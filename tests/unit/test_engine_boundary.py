"""The engine is written only against ports: it imports neither SQLAlchemy nor the SQL store.

Two checks, both covering modules added later automatically:

* a source scan of every ``ratchet/engine`` module finds no import of ``sqlalchemy`` or
  ``ratchet.sql`` anywhere in it: at module level, inside functions, under ``TYPE_CHECKING``,
  relative, or through ``importlib.import_module`` / ``__import__`` with a literal name;
* importing every engine module in a fresh interpreter loads neither. ``ratchet/__init__.py``
  is replaced by an empty package module there (same ``__path__``), so only what the engine's
  own imports bring in is counted, not what the package root may load for its default plugins.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

import ratchet.engine

ENGINE_DIR = Path(ratchet.engine.__path__[0])

#: Modules (and their submodules) the engine must not import.
FORBIDDEN = ("sqlalchemy", "ratchet.sql")


def forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module an ``ImportFrom`` names, with a relative one resolved against ``package``."""
    if node.level == 0:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(source: str, package: str = "ratchet.engine") -> list[tuple[int, str]]:
    """Every module name ``source`` imports, anywhere in it, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [(line, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            found.append((line, module))
            found += [(line, f"{module}.{alias.name}") for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
        ):
            found.append((line, node.args[0].value))
    return found


def violations(source: str) -> list[str]:
    return [f"line {line}: imports {name}" for line, name in imports_of(source) if forbidden(name)]


def engine_sources() -> list[Path]:
    return sorted(ENGINE_DIR.rglob("*.py"))


def test_the_scan_covers_the_known_modules() -> None:
    names = {p.name for p in engine_sources()}
    assert {"__init__.py", "app.py", "worker.py", "workflows.py", "batches.py"} <= names


@pytest.mark.parametrize(
    "bad",
    [
        "import sqlalchemy",
        "import sqlalchemy.orm as orm",
        "from sqlalchemy import event",
        "from sqlalchemy.orm import Session",
        "from ratchet.sql.workflow_store import FlowJob",
        "from ratchet.sql import schema",
        "from ratchet import sql",
        "import ratchet.sql.store",
        "from ..sql.store import SqlStore",
        "from ..sql import store",
        "def f():\n    from ratchet.sql.workflow_store import EffectKind\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sqlalchemy import Connection\n",
        "import importlib\nm = importlib.import_module('ratchet.sql.store')\n",
        "m = __import__('sqlalchemy')\n",
    ],
)
def test_the_scan_detects_forbidden_imports(bad: str) -> None:
    assert violations(bad)


def test_the_scan_allows_the_engines_own_imports() -> None:
    fine = (
        "from ratchet.ports import Store, WorkflowStore\n"
        "from ratchet.domain.workflow import FlowEffect\n"
        "from . import workflows\n"
        "from .app import Ratchet\n"
        "import ratchet.sqlite_helpers\n"  # a name that only starts like the package
        "def f():\n"
        "    from ratchet.engine.workflows import apply_effects\n"
    )
    assert violations(fine) == []


@pytest.mark.parametrize("path", engine_sources(), ids=lambda p: p.name)
def test_engine_module_imports_no_sql(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8")) == []


# --------------------------------------------------------------------------- fresh interpreter

IMPORT_ENGINE = """
import importlib, importlib.util, json, pkgutil, sys, types
root = types.ModuleType("ratchet")
root.__path__ = list(importlib.util.find_spec("ratchet").submodule_search_locations)
sys.modules["ratchet"] = root
import ratchet.engine
names = sorted(
    info.name for info in pkgutil.walk_packages(ratchet.engine.__path__, "ratchet.engine.")
)
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "modules": sorted(sys.modules)}))
"""


@cache
def fresh_import() -> tuple[tuple[str, ...], frozenset[str]]:
    """Import every engine module in a fresh interpreter; return (imported, sys.modules)."""
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ENGINE], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return tuple(data["imported"]), frozenset(data["modules"])


def test_every_engine_module_is_imported() -> None:
    imported, modules = fresh_import()
    on_disk = {
        "ratchet.engine." + ".".join(p.relative_to(ENGINE_DIR).with_suffix("").parts)
        for p in engine_sources()
        if p.name != "__init__.py"
    }
    assert on_disk <= set(imported)
    assert {"ratchet.engine.worker", "ratchet.engine.app"} <= set(imported) <= modules


def test_importing_the_engine_loads_no_sqlalchemy_and_no_sql_store() -> None:
    _, modules = fresh_import()
    assert sorted(m for m in modules if forbidden(m)) == []


# ------------------------------------------------------------------------------- the line
def engine_graph() -> dict[str, set[str]]:
    """Which engine modules each engine module imports: anywhere in it, ``TYPE_CHECKING``
    blocks and imports inside functions included."""
    modules = {p.stem for p in engine_sources() if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for path in engine_sources():
        if path.stem == "__init__":
            continue
        found = set()
        for _, name in imports_of(path.read_text()):
            parts = name.split(".")
            if parts[:2] == ["ratchet", "engine"] and len(parts) > 2 and parts[2] in modules:
                found.add(parts[2])
        graph[path.stem] = found - {path.stem}
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as the path that closes it), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_engine_modules_import_each_other_in_one_direction() -> None:
    """The engine's modules form a line: app and worker on top, the composition root under
    them, the parts under it and the faces they are typed against (``engine/host.py``) at the
    bottom. No two modules import each other, not even for type hints."""
    graph = engine_graph()
    assert {"app", "worker", "assembly", "host"} <= graph.keys()
    assert cycle_in(graph) is None, f"import cycle: {' -> '.join(cycle_in(graph) or [])}"
    assert "worker" not in set().union(*(graph[m] for m in graph if m not in {"app"}))
    assert "app" not in set().union(*graph.values())
