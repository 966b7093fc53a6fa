#!/usr/bin/env python3
"""Project entry point that works on a fresh machine with only Python 3.11+ and pip.

    python3 dev.py demo    # run the demo: real jobs on the embedded SQLite store
    python3 dev.py test    # run the whole test suite (starts its own database servers)

Each command installs what it needs first: uv (from the package index, via pip), the workspace
packages (``uv sync``), and for ``test`` first the PostgreSQL, MariaDB and Redis server packages
and the build dependencies of mysqlclient (the optional C MySQL driver) when they are missing
(Debian/Ubuntu, needs root). Extra arguments go to pytest / the demo.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, **kwargs)  # type: ignore[call-overload]


def ensure_uv() -> str:
    uv = shutil.which("uv")
    if uv:
        return uv
    run([sys.executable, "-m", "pip", "install", "--quiet", "uv"])
    uv = shutil.which("uv")
    if uv:
        return uv
    return str(Path(sys.executable).parent / "uv")


def sync(uv: str, *options: str) -> None:
    # Compile bytecode at install time: worker subprocesses in the tests then start fast even
    # where PYTHONDONTWRITEBYTECODE is set.
    os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
    locked = ["--locked"] if (ROOT / "uv.lock").exists() else []
    run([uv, "sync", *locked, *options])


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test"}:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    uv = ensure_uv()
    if command == "demo":
        # The demo needs no MySQL driver: skip building mysqlclient (a C extension), keeping it
        # if a development install already has it.
        sync(uv, "--no-group", "mysqlclient", "--inexact")
        # --no-sync: a plain `uv run` would sync the default groups again, mysqlclient included.
        return subprocess.call([uv, "run", "--no-sync", "ratchet", "demo", *rest], cwd=ROOT)
    if os.name == "posix":
        # Before the sync: it also installs what building mysqlclient needs.
        env = {**os.environ, "RATCHET_PYTHON": sys.executable}
        run(["bash", str(ROOT / "scripts" / "install-test-services.sh")], env=env)
    sync(uv)
    return subprocess.call([uv, "run", "pytest", *rest], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
