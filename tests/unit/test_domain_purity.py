"""The domain package stays pure: no infrastructure imports, no clock, no randomness, no I/O.

Every module under ``ratchet.domain`` is covered automatically (found with pkgutil and by
walking the package directory), including modules added later.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

import ratchet.domain

DOMAIN_DIR = Path(ratchet.domain.__path__[0])

#: Modules that must not be loaded by importing the domain.
FORBIDDEN_LOADED = [
    "sqlalchemy",
    "pluggy",
    "sqlite3",
    "_sqlite3",
    "click",
    "alembic",
    "ratchet.sql",
    "ratchet.engine",
    "ratchet.adapters",
]

#: Top-level modules a domain module must not import.
FORBIDDEN_IMPORTS = {
    "time",
    "random",
    "secrets",
    "threading",
    "multiprocessing",
    "socket",
    "subprocess",
    "asyncio",
    "sqlite3",
    "sqlalchemy",
    "pluggy",
    "click",
    "alembic",
}
FORBIDDEN_RATCHET_PACKAGES = ("ratchet.sql", "ratchet.engine", "ratchet.adapters")

#: ``<anything>.<attr>(...)`` calls that read a clock, draw randomness or touch the environment.
FORBIDDEN_METHOD_CALLS = {
    "now",
    "utcnow",
    "today",
    "monotonic",
    "perf_counter",
    "uuid1",
    "uuid4",
    "uuid6",
    "uuid7",
    "urandom",
    "getenv",
}
FORBIDDEN_FUNCTION_CALLS = {"open", "input", "print", "breakpoint"}

#: With ``stub_root``, an empty module stands in for ``ratchet/__init__.py`` (same ``__path__``),
#: so only what the domain itself imports is loaded.
IMPORT_ALL = """
import importlib, importlib.util, json, pkgutil, sys, types
if {stub_root}:
    root = types.ModuleType("ratchet")
    root.__path__ = list(importlib.util.find_spec("ratchet").submodule_search_locations)
    sys.modules["ratchet"] = root
import ratchet.domain
import ratchet.domain.polling
names = sorted(
    info.name for info in pkgutil.walk_packages(ratchet.domain.__path__, "ratchet.domain.")
)
for name in names:
    importlib.import_module(name)
print(json.dumps({{"imported": names, "modules": sorted(sys.modules)}}))
"""


@cache
def fresh_import(stub_root: bool) -> tuple[tuple[str, ...], frozenset[str]]:
    """Import every domain module in a fresh interpreter; return (imported, sys.modules)."""
    code = IMPORT_ALL.format(stub_root=stub_root)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return tuple(data["imported"]), frozenset(data["modules"])


def loaded(prefix: str, modules: frozenset[str]) -> list[str]:
    return sorted(m for m in modules if m == prefix or m.startswith(prefix + "."))


def test_every_domain_module_is_imported() -> None:
    imported, modules = fresh_import(stub_root=True)
    on_disk = {
        "ratchet.domain." + ".".join(p.relative_to(DOMAIN_DIR).with_suffix("").parts)
        for p in DOMAIN_DIR.rglob("*.py")
        if p.name != "__init__.py"
    }
    assert on_disk <= set(imported)
    assert {"ratchet.domain.polling", "ratchet.domain.lifecycle", "ratchet.domain.retry"} <= set(
        imported
    )
    assert set(imported) <= modules


@pytest.mark.parametrize("forbidden", FORBIDDEN_LOADED)
def test_the_domain_loads_no_infrastructure(forbidden: str) -> None:
    _, modules = fresh_import(stub_root=True)
    assert loaded(forbidden, modules) == []


def test_the_domain_loads_no_other_ratchet_module() -> None:
    _, modules = fresh_import(stub_root=True)
    outside = [m for m in loaded("ratchet", modules) if m != "ratchet"]
    assert [m for m in outside if not m.startswith("ratchet.domain")] == []


def test_a_plain_import_of_ratchet_domain_loads_no_infrastructure() -> None:
    _, modules = fresh_import(stub_root=False)
    assert [m for prefix in FORBIDDEN_LOADED for m in loaded(prefix, modules)] == []


# --------------------------------------------------------------------------- source scan


def impurities(source: str) -> list[str]:
    """Every forbidden import, clock read, randomness or I/O call in ``source``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            names = []
        for name in names:
            if name.split(".")[0] in FORBIDDEN_IMPORTS or name.startswith(
                FORBIDDEN_RATCHET_PACKAGES
            ):
                found.append(f"line {line}: imports {name}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and (
                func.attr in FORBIDDEN_METHOD_CALLS
                or (isinstance(func.value, ast.Name) and func.value.id == "time")
            ):
                found.append(f"line {line}: calls {ast.unparse(func)}()")
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_FUNCTION_CALLS:
                found.append(f"line {line}: calls {func.id}()")
        if (isinstance(node, ast.Name) and node.id in {"random", "environ"}) or (
            isinstance(node, ast.Attribute) and node.attr in {"random", "environ"}
        ):
            found.append(f"line {line}: uses {ast.unparse(node)}")
    return found


def domain_sources() -> list[Path]:
    return sorted(DOMAIN_DIR.rglob("*.py"))


def test_the_scan_covers_the_known_modules() -> None:
    names = {p.name for p in domain_sources()}
    assert {"__init__.py", "polling.py", "lifecycle.py", "options.py", "retry.py"} <= names


@pytest.mark.parametrize(
    "bad",
    [
        "import time",
        "import time as t",
        "from time import monotonic",
        "from random import choice",
        "import random",
        "import threading",
        "from ratchet.sql import schema",
        "import ratchet.engine.worker",
        "x = datetime.now(UTC)",
        "x = datetime.utcnow()",
        "x = date.today()",
        "x = time.time()",
        "x = time.monotonic()",
        "x = uuid.uuid4()",
        "x = os.environ['X']",
        "x = os.getenv('X')",
        "x = open('f').read()",
        "def f(random): return random",
    ],
)
def test_the_scan_detects_impurities(bad: str) -> None:
    assert impurities(bad)


def test_the_scan_allows_pure_code() -> None:
    pure = (
        "from datetime import datetime, timedelta\n"
        "import enum, math, uuid\n"
        "def f(at: datetime) -> datetime:\n"
        "    '''Not random, never calls time.time() or datetime.now().'''\n"
        "    return at.replace(second=0) + timedelta(seconds=1)  # .now( in a comment\n"
        "def g(at: datetime) -> object:\n"
        "    return at.time()\n"
    )
    assert impurities(pure) == []


@pytest.mark.parametrize("path", domain_sources(), ids=lambda p: p.name)
def test_domain_module_is_pure(path: Path) -> None:
    assert impurities(path.read_text(encoding="utf-8")) == []
