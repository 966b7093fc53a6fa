#!/usr/bin/env python3
"""Project entry point that works on a fresh machine with only Python 3.11+.

    python3 dev.py demo     # run the demo: real jobs on the embedded SQLite store
    python3 dev.py test     # run the whole test suite (starts its own database servers)
    python3 dev.py wheels   # build every distribution into dist/wheelhouse/ [--out-dir DIR]

Each command installs what it needs first. uv: the one on PATH, or else a private copy that
dev.py pip-installs into its own virtual environment, .venv-bootstrap/, so the Python running
dev.py is never written to (Debian's python3 refuses a plain `pip install`; creating a virtual
environment with it needs the python3.X-venv package, which dev.py apt-gets when run as root).
Then, for demo and test, the workspace packages (``uv sync`` into .venv, on the Python that runs
dev.py unless UV_PYTHON says otherwise), and for test first the PostgreSQL, PgBouncer, MariaDB and
Redis server packages, Prometheus, Chromium (the dashboard's browser tests) and the build
dependencies of mysqlclient (the optional C MySQL driver) when they are missing (Debian/Ubuntu,
needs root). Extra arguments go to pytest / the demo.

`python3 dev.py test` without arguments also runs the framework tests (tests/frameworks) a second
time on Python 3.12 or newer, where Django 6 ships ``django.tasks`` (the workspace's own Python
runs them with Django 5.2 and the django-tasks backport). That environment is .venv-py312/, built
once; the interpreter is $RATCHET_SECOND_PYTHON, else a python3.12 / python3.13 found on PATH or
in pyenv, else whatever ``uv`` finds for 3.12 (``uv python install 3.12`` provides one). Without
one the run fails and says so: it is never skipped.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
BOOTSTRAP = ROOT / ".venv-bootstrap"
WHEELHOUSE = ROOT / "dist" / "wheelhouse"

#: Every distribution of the workspace and its import package, ratchet-core first.
DISTRIBUTIONS = {
    "ratchet-core": "ratchet",
    "ratchet-postgres": "ratchet_postgres",
    "ratchet-mysql": "ratchet_mysql",
    "ratchet-redis-coordinator": "ratchet_redis_coordinator",
    "ratchet-django": "ratchet_django",
    "ratchet-dashboard": "ratchet_dashboard",
}
CORE = "ratchet-core"
#: The second interpreter's environment and what runs there (Django 6 needs Python 3.12+).
SECOND_VENV = ROOT / ".venv-py312"
SECOND_TESTS = ["tests/frameworks"]


def run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, **kwargs)  # type: ignore[call-overload]


def venv_executable(venv: Path, name: str) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / f"{name}.exe"
    return venv / "bin" / name


def has_ensurepip() -> bool:
    importlib.invalidate_caches()
    return importlib.util.find_spec("ensurepip") is not None


def is_debian_python() -> bool:
    """Whether this is the distribution's own Python on a Debian-like system."""
    return sys.base_prefix == "/usr" and shutil.which("apt-get") is not None


def is_root() -> bool:
    return os.name == "posix" and os.geteuid() == 0


def ensure_venv_support() -> None:
    """Make sure this Python can create a virtual environment with pip in it.

    Debian and Ubuntu split ``ensurepip`` out of their Python into the python3.X-venv package.
    Install it when this is Debian's Python and we are root; otherwise exit with what to do.
    """
    if has_ensurepip():
        return
    package = f"python3.{sys.version_info.minor}-venv"
    debian = is_debian_python()
    if debian and is_root():
        print(f"dev.py: {sys.executable} has no ensurepip; installing {package}", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update"], env=env)
        run(["apt-get", "install", "-y", "--no-install-recommends", package], env=env)
        if has_ensurepip():
            return
    hint = f"install {package} (apt-get install {package}) or uv" if debian else "install uv"
    sys.exit(
        f"dev.py: uv is not on PATH and {sys.executable} cannot create a virtual environment to "
        f"install it into (it has no ensurepip module): {hint}, then run dev.py again"
    )


def ensure_uv() -> str:
    """The uv that runs us ($UV), uv from PATH, or the private copy in .venv-bootstrap/.

    The private copy is installed on first use.
    """
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv and Path(uv).is_file():
        return uv
    private = venv_executable(BOOTSTRAP, "uv")
    if private.exists():
        return str(private)
    print(
        f"dev.py: uv is not on PATH; installing it into {BOOTSTRAP.name}/ "
        f"({sys.executable} itself is left unchanged)",
        flush=True,
    )
    ensure_venv_support()
    shutil.rmtree(BOOTSTRAP, ignore_errors=True)  # whatever an interrupted attempt left
    run([sys.executable, "-m", "venv", str(BOOTSTRAP)])
    python = venv_executable(BOOTSTRAP, "python")
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "uv"])
    return str(private)


def sync(uv: str, *options: str) -> None:
    # Compile bytecode at install time: worker subprocesses in the tests then start fast even
    # where PYTHONDONTWRITEBYTECODE is set.
    os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
    locked = ["--locked"] if (ROOT / "uv.lock").exists() else []
    run([uv, "sync", *locked, *options])


def version_problems(root: Path = ROOT) -> list[str]:
    """What keeps the distributions from being one release; empty when nothing does.

    All of them must have ratchet-core's version, in pyproject.toml and in the import package's
    ``__version__``, and every adapter must depend on exactly that ratchet-core (``==``).
    """
    problems: list[str] = []
    projects = {
        name: tomllib.loads((root / "packages" / name / "pyproject.toml").read_text())["project"]
        for name in DISTRIBUTIONS
    }
    version = projects[CORE]["version"]
    for name, package in DISTRIBUTIONS.items():
        project = projects[name]
        if project["version"] != version:
            problems.append(f"{name} is version {project['version']}, {CORE} is {version}")
        init = root / "packages" / name / "src" / package / "__init__.py"
        found = re.findall(r'^__version__ = "([^"]*)"$', init.read_text(), re.MULTILINE)
        if found != [version]:
            problems.append(f"{package}.__version__ is {found or 'missing'}, expected {version!r}")
        if name == CORE:
            continue
        pins = [dep for dep in project["dependencies"] if re.match(r"ratchet[-_.]core\b", dep)]
        if pins != [f"{CORE}=={version}"]:
            problems.append(f"{name} depends on {pins or 'no ' + CORE}, expected {CORE}=={version}")
    return problems


def wheels(uv: str, argv: list[str]) -> int:
    """Build a wheel of every distribution into the wheelhouse (replacing older ones)."""
    out = WHEELHOUSE
    if argv[:1] == ["--out-dir"] and len(argv) == 2:
        out = Path(argv[1]).resolve()
    elif argv:
        print("usage: python3 dev.py wheels [--out-dir DIR]", file=sys.stderr)
        return 2
    problems = version_problems()
    if problems:
        print("dev.py: the distributions are not one release:", *problems, sep="\n  ")
        return 1
    out.mkdir(parents=True, exist_ok=True)
    for name in DISTRIBUTIONS:
        for old in out.glob(f"{name.replace('-', '_')}-*.whl"):
            old.unlink()
    for name in DISTRIBUTIONS:
        # --no-sources: build exactly what an index would get, without uv's workspace links.
        run([uv, "build", "--package", name, "--wheel", "--no-sources", "--out-dir", str(out)])
    version = tomllib.loads((ROOT / "packages" / CORE / "pyproject.toml").read_text())["project"][
        "version"
    ]
    print(f"\nWheels of Ratchet for Python {version} in {out}. Install, for example, with:")
    print(
        f'  pip install --find-links {out} "ratchet-core=={version}" "ratchet-postgres=={version}"'
    )
    return 0


def second_python() -> str:
    """The interpreter of the Django 6 leg: $RATCHET_SECOND_PYTHON, else a working python3.12
    or python3.13 from PATH or pyenv, else ``3.12`` (a version request uv resolves itself)."""
    chosen = os.environ.get("RATCHET_SECOND_PYTHON")
    if chosen:
        return chosen
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(f"python3.{minor}") for minor in (12, 13)]
    candidates += [str(p) for p in sorted(pyenv.glob("3.1[23].*/bin/python3"))]
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return "3.12"


def second_leg(uv: str) -> int:
    """Run SECOND_TESTS on Python 3.12+ with Django 6 (the environment is synced first)."""
    python = second_python()
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(SECOND_VENV), "UV_PYTHON": python}
    try:
        run([uv, "sync", "--locked", "--python", python], env=env)
    except subprocess.CalledProcessError:
        print(
            f"dev.py: FAILED to build {SECOND_VENV.name}/ on Python {python} for the Django 6 "
            "tests. Install a Python 3.12+ (`uv python install 3.12`, or pyenv) or point "
            "RATCHET_SECOND_PYTHON at one, then run dev.py test again.",
            file=sys.stderr,
            flush=True,
        )
        return 1
    print(f"dev.py: framework tests on {python} (Django 6)", flush=True)
    return subprocess.call([uv, "run", "--no-sync", "pytest", *SECOND_TESTS], cwd=ROOT, env=env)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test", "wheels"}:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    uv = ensure_uv()
    if command == "wheels":
        return wheels(uv, rest)
    # The workspace environment is built on the Python that runs dev.py (Debian's python3 too).
    os.environ.setdefault("UV_PYTHON", sys.executable)
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
    # The short Django 6 leg first, so that the whole suite's summary is the last line.
    second = second_leg(uv) if not rest else 0
    main_suite = subprocess.call([uv, "run", "pytest", *rest], cwd=ROOT)
    return main_suite or second


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
