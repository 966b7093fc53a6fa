"""Load the repository's ``dev.py`` as a module, for tests of its helpers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_dev() -> ModuleType:
    """A fresh module object for ``dev.py`` (each call loads it again)."""
    spec = importlib.util.spec_from_file_location("ratchet_dev_script", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
