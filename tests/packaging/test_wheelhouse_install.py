"""Install Ratchet the way the README says, into fresh virtual environments, and use it.

``python3 dev.py wheels`` builds the wheelhouse once per session. Every virtual environment is
created by ``uv venv --seed`` (pip comes from uv's cache) on the interpreter running the tests.
The README's ``pip install --find-links dist/wheelhouse ...`` lines are then run as written,
except for the wheelhouse's path. Ratchet's own distributions come from the wheelhouse and the
third-party ones from the package index, through pip and its cache. A job then runs end to end
on SQLite in that environment, outside the workspace.

Marked ``wheelhouse``: it needs the package index and takes about half a minute, so it can be
left out locally with ``-m "not wheelhouse"``. CI runs it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import ratchet

pytestmark = pytest.mark.wheelhouse

ROOT = Path(__file__).resolve().parents[2]
V = ratchet.__version__
WHEELHOUSE_ARG = "dist/wheelhouse"
DISTRIBUTIONS = (
    "ratchet-core",
    "ratchet-postgres",
    "ratchet-mysql",
    "ratchet-redis-coordinator",
    "ratchet-django",
    "ratchet-dashboard",
)


def child_env() -> dict[str, str]:
    """The environment without anything that would point a child at the workspace."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "UV_PYTHON"}
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(cmd: list[str], *, timeout: float, cwd: Path | None = None) -> str:
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"{shlex.join(cmd)} exited with {done.returncode}\n{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    return done.stdout


@pytest.fixture(scope="session")
def uv() -> str:
    candidates = [os.environ.get("UV"), shutil.which("uv"), str(ROOT / ".venv-bootstrap/bin/uv")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("no uv found ($UV, PATH, .venv-bootstrap/): run the tests with `uv run pytest`")


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory, uv: str) -> Path:
    """``python3 dev.py wheels --out-dir ...``, once per session."""
    out = tmp_path_factory.mktemp("wheelhouse")
    env = {**child_env(), "UV": uv}
    subprocess.run(
        [sys.executable, str(ROOT / "dev.py"), "wheels", "--out-dir", str(out)],
        env=env,
        check=True,
        timeout=150,
        capture_output=True,
    )
    names = sorted(path.name for path in out.glob("*.whl"))
    assert names == sorted(f"{d.replace('-', '_')}-{V}-py3-none-any.whl" for d in DISTRIBUTIONS)
    return out


class Venv:
    def __init__(self, path: Path, wheelhouse: Path) -> None:
        self.path = path
        self.wheelhouse = wheelhouse
        self.python = str(path / "bin" / "python")

    def pip_line(self, line: str) -> str:
        """Run a documented ``pip install --find-links dist/wheelhouse ...`` line."""
        argv = shlex.split(line, comments=True)
        assert argv[:2] == ["pip", "install"], line
        assert WHEELHOUSE_ARG in argv, line
        argv = [str(self.wheelhouse) if arg == WHEELHOUSE_ARG else arg for arg in argv]
        return run([self.python, "-m", *argv], timeout=240)


@pytest.mark.parametrize(
    "module",
    [
        "ratchet_postgres",
        "ratchet_mysql",
        "ratchet_redis_coordinator",
        "ratchet_django",
        "ratchet_dashboard",
    ],
)
def test_each_adapter_wheel_carries_the_cores_install_check(wheelhouse: Path, module: str) -> None:
    """The check runs before the adapter imports ``ratchet`` (maybe another project's), so the
    wheel holds a copy, made at build time from the one file in the tree."""
    (wheel,) = wheelhouse.glob(f"{module}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        copied = archive.read(f"{module}/_distribution.py")
    assert copied == Path(ratchet.__file__).with_name("_distribution.py").read_bytes()


@pytest.fixture
def fresh_venv(tmp_path: Path, uv: str, wheelhouse: Path) -> Iterator[Venv]:
    path = tmp_path / "venv"
    run([uv, "venv", "--quiet", "--seed", "--python", sys.executable, str(path)], timeout=120)
    yield Venv(path, wheelhouse)


def readme_install_lines() -> list[str]:
    """The README's pip lines that install from the wheelhouse."""
    text = (ROOT / "README.md").read_text()
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines if line.startswith(f"pip install --find-links {WHEELHOUSE_ARG}")]


JOBS = """
def add(a: int, b: int) -> int:
    return a + b
"""

SCRIPT = """
import json, sys
from datetime import timedelta

import ratchet
import ratchet_postgres, ratchet_mysql, ratchet_redis_coordinator, ratchet_django
import ratchet_dashboard
from ratchet import Ratchet

import smoke_jobs

app = Ratchet(f"sqlite:///{sys.argv[1]}", allowed_modules=["smoke_jobs"])
handle = app.enqueue(smoke_jobs.add, 2, 3).submit()
worker = app.worker(
    concurrency=1, min_delay=timedelta(milliseconds=50), max_delay=timedelta(milliseconds=200)
)
worker.start()
settled = worker.wait_until(lambda: handle.status().is_terminal, timeout=60)
worker.stop()
print(json.dumps({
    "settled": settled,
    "status": handle.status().value,
    "result": handle.result() if settled else None,
    "ratchet": ratchet.__file__,
    "version": ratchet.__version__,
    "adapters": [
        m.__version__
        for m in (
            ratchet_postgres,
            ratchet_mysql,
            ratchet_redis_coordinator,
            ratchet_django,
            ratchet_dashboard,
        )
    ],
}))
app.close()
"""


def test_the_readme_install_runs_a_job_on_sqlite(fresh_venv: Venv, tmp_path: Path) -> None:
    lines = readme_install_lines()
    assert lines, "the README has no `pip install --find-links dist/wheelhouse` line"
    for line in lines:
        fresh_venv.pip_line(line)
    # The adapters the README does not spell out install the same way.
    fresh_venv.pip_line(
        f'pip install --find-links {WHEELHOUSE_ARG} "ratchet-mysql=={V}" '
        f'"ratchet-redis-coordinator=={V}" "ratchet-django=={V}" "ratchet-dashboard=={V}"'
    )
    listed = json.loads(run([fresh_venv.python, "-m", "pip", "list", "--format=json"], timeout=60))
    versions = {item["name"]: item["version"] for item in listed}
    assert {name: versions.get(name) for name in DISTRIBUTIONS} == dict.fromkeys(DISTRIBUTIONS, V)

    workdir = tmp_path / "app"
    workdir.mkdir()
    (workdir / "smoke_jobs.py").write_text(JOBS)
    (workdir / "smoke.py").write_text(SCRIPT)
    out = run([fresh_venv.python, "smoke.py", str(workdir / "jobs.db")], cwd=workdir, timeout=120)
    report = json.loads(out.strip().splitlines()[-1])
    assert report["status"] == "SUCCEEDED", report
    assert report["result"] == 5
    assert Path(report["ratchet"]).is_relative_to(fresh_venv.path), "imported outside the venv"
    assert report["version"] == V
    assert report["adapters"] == [V] * 5

    version = run([str(fresh_venv.path / "bin" / "ratchet"), "--version"], timeout=60)
    assert V in version
    # The dashboard's wheel carries its templates and adds its command to `ratchet`.
    dashboard = run([str(fresh_venv.path / "bin" / "ratchet"), "dashboard", "--help"], timeout=60)
    assert "Serve the web dashboard" in dashboard


OTHER_PYPROJECT = """
[project]
name = "ratchet-core"
version = "0.1.0"
description = "Another project that is also named ratchet-core and imports as ratchet"

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["ratchet"]
"""


def test_an_adapter_over_the_other_ratchet_core_says_how_to_fix_it(
    fresh_venv: Venv, tmp_path: Path, uv: str
) -> None:
    # A stand-in for the other project's ratchet-core 0.1.0, built here so that the test does
    # not depend on what that project publishes.
    other = tmp_path / "other"
    (other / "ratchet").mkdir(parents=True)
    (other / "pyproject.toml").write_text(OTHER_PYPROJECT)
    (other / "ratchet" / "__init__.py").write_text("")
    run(
        [uv, "build", "--wheel", "--quiet", "--out-dir", str(other / "dist"), str(other)],
        timeout=120,
    )
    (other_wheel,) = (other / "dist").glob("*.whl")
    (postgres_wheel,) = fresh_venv.wheelhouse.glob("ratchet_postgres-*.whl")
    pip = [fresh_venv.python, "-m", "pip", "install", "--quiet", "--no-deps"]
    run([*pip, str(other_wheel), str(postgres_wheel)], timeout=120)

    failed = subprocess.run(
        [fresh_venv.python, "-c", "import ratchet_postgres"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert failed.returncode == 1
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ratchet_postgres._distribution.RatchetInstallError: ratchet-postgres "
        f"{V} needs ratchet-core=={V}, but the installed ratchet-core 0.1.0 is another project "
        "('Another project that is also named ratchet-core and imports as ratchet')"
    ), failed.stderr

    # The command in the message repairs the environment.
    advice = re.search(r"install matching versions: (pip install .*?) \(", last)
    assert advice, last
    fresh_venv.pip_line(advice.group(1))
    run(
        [fresh_venv.python, "-c", "import ratchet_postgres; from ratchet import Ratchet"],
        timeout=60,
    )


FIRST_HOUR_JOBS = """
def charge(order_id: int) -> dict:
    return {"charged": order_id}


def broken(order_id: int) -> None:
    raise KeyError(f"missing-key-{order_id}")
"""

FIRST_HOUR_SCRIPT = """
import sys
from datetime import timedelta

from ratchet import JobStatus, Ratchet

import shop_jobs

app = Ratchet(sys.argv[1], allowed_modules=["shop_jobs"], auto_migrate=False)
ok = app.enqueue(shop_jobs.charge, 7).submit()
bad = app.enqueue(shop_jobs.broken, 7).submit()
worker = app.worker(concurrency=2, min_delay=timedelta(milliseconds=50))
worker.start()
worker.wait_until(lambda: ok.status().is_terminal and bad.status().is_terminal, timeout=60)
worker.stop()
assert ok.status() is JobStatus.SUCCEEDED and ok.result() == {"charged": 7}, ok.status()
assert bad.status() is JobStatus.FAILED, bad.status()
print(bad.id)
app.close()
"""


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single line a user mistake prints (and no traceback)."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.postgres
def test_the_first_hour_on_postgresql_from_the_wheelhouse(
    fresh_venv: Venv, tmp_path: Path, postgres_empty_url: str
) -> None:
    """Install as the README says, meet the unmigrated database, upgrade it as the one-line
    error says, run a job that succeeds and one that fails, and read the failure's traceback."""
    for line in readme_install_lines():
        fresh_venv.pip_line(line)
    ratchet_cli = str(fresh_venv.path / "bin" / "ratchet")
    workdir = tmp_path / "shop"
    workdir.mkdir()
    (workdir / "shop_jobs.py").write_text(FIRST_HOUR_JOBS)
    (workdir / "first_hour.py").write_text(FIRST_HOUR_SCRIPT)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ratchet_cli, *args],
            cwd=workdir,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    missing = one_line_error(cli("jobs", "list", "--url", postgres_empty_url))
    assert "ratchet db upgrade" in missing, missing
    assert one_line_error(cli("worker", "shop_jobs:charge")).startswith("error:")
    assert "sqlite" in one_line_error(cli("jobs", "list", "--url", "sqlite:///nosuch.db"))
    assert not (workdir / "nosuch.db").exists()

    upgrade = cli("db", "upgrade", "--url", postgres_empty_url)
    assert upgrade.returncode == 0, upgrade.stderr
    out = run([fresh_venv.python, "first_hour.py", postgres_empty_url], cwd=workdir, timeout=180)
    failed_id = out.strip().splitlines()[-1]

    shown = cli("jobs", "show", "--url", postgres_empty_url, "--traceback", failed_id)
    assert shown.returncode == 0, shown.stderr
    first, *trace = shown.stdout.splitlines()
    assert first.endswith("KeyError: 'missing-key-7'"), first
    assert trace[0] == "Traceback (most recent call last):"
    assert any('shop_jobs.py", line' in line for line in trace), shown.stdout
    assert trace[-1] == "KeyError: 'missing-key-7'"
