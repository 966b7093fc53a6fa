"""The import-time checks against another project's ``ratchet-core`` or a mismatched version.

The decisions are tested as functions on fake metadata. The wiring (``import ratchet`` and
``import ratchet_<adapter>`` really run them) is tested in child interpreters that see a fake
``ratchet_core-*.dist-info`` ahead of the real one on ``sys.path``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ratchet
from ratchet import _distribution as dist
from ratchet._distribution import Installed, RatchetInstallError

V = ratchet.__version__
OURS = Installed(V, "Ratchet for Python: a persistent, database-backed job scheduler.")
# What the other project's ratchet-core 0.1.0 declares.
FOREIGN = Installed("0.1.0", "The accountability layer for AI agents — core framework")
INSTALL = f'pip install --find-links dist/wheelhouse "ratchet-core=={V}"'


def lookup(found: Installed | None) -> dist.Lookup:
    def fake(name: str) -> Installed | None:
        assert name == "ratchet-core"
        return found

    return fake


# --- the core's own check ----------------------------------------------------------------------


def test_core_accepts_its_own_metadata() -> None:
    dist.check_core(V, lookup(OURS))


def test_core_accepts_no_metadata_at_all() -> None:
    # Running from a source tree: no installed ratchet-core to disagree with.
    dist.check_core(V, lookup(None))


def test_core_rejects_the_other_project() -> None:
    with pytest.raises(RatchetInstallError) as caught:
        dist.check_core(V, lookup(FOREIGN))
    message = str(caught.value)
    assert message.startswith(
        "the installed ratchet-core 0.1.0 is another project "
        "('The accountability layer for AI agents — core framework') "
        "that also uses the import name 'ratchet'; "
        f"expected Ratchet for Python {V}: {INSTALL} "
    )
    assert "python3 dev.py wheels" in message
    assert "\n" not in message


def test_core_rejects_the_other_project_even_at_our_version() -> None:
    with pytest.raises(RatchetInstallError, match="is another project"):
        dist.check_core(V, lookup(Installed(V, FOREIGN.summary)))


def test_core_rejects_metadata_of_another_version() -> None:
    with pytest.raises(RatchetInstallError) as caught:
        dist.check_core(V, lookup(Installed("0.1.9", OURS.summary)))
    message = str(caught.value)
    assert message.startswith(
        f"the installed ratchet-core metadata says 0.1.9 but its 'ratchet' package is {V} "
        "(a stale or mixed install; in a checkout run `uv sync`): "
    )
    assert INSTALL in message


def test_the_error_is_an_import_error() -> None:
    assert issubclass(RatchetInstallError, ImportError)


# --- an adapter's check ------------------------------------------------------------------------


def test_adapter_accepts_core_at_its_own_version() -> None:
    dist.check_adapter("ratchet-postgres", V, lookup(OURS))


def test_adapter_accepts_no_metadata_at_all() -> None:
    dist.check_adapter("ratchet-postgres", V, lookup(None))


def test_adapter_rejects_the_other_project() -> None:
    with pytest.raises(RatchetInstallError) as caught:
        dist.check_adapter("ratchet-postgres", V, lookup(FOREIGN))
    assert str(caught.value) == (
        f"ratchet-postgres {V} needs ratchet-core=={V}, but the installed ratchet-core 0.1.0 is "
        "another project ('The accountability layer for AI agents — core framework') that also "
        "uses the import name 'ratchet'; install matching versions: "
        f'{INSTALL} "ratchet-postgres=={V}" '
        "(dist/wheelhouse is built by `python3 dev.py wheels` in a Ratchet for Python checkout)"
    )


@pytest.mark.parametrize("other", ["0.1.0", "0.2.1", "1.0.0.dev0"])
def test_adapter_rejects_core_of_another_version(other: str) -> None:
    with pytest.raises(RatchetInstallError) as caught:
        dist.check_adapter("ratchet-mysql", V, lookup(Installed(other, OURS.summary)))
    assert str(caught.value).startswith(
        f"ratchet-mysql {V} needs ratchet-core=={V}, but the installed ratchet-core is {other}; "
        f'install matching versions: {INSTALL} "ratchet-mysql=={V}" '
    )


def test_installed_reads_real_metadata() -> None:
    found = dist.installed("ratchet-core")
    assert found is not None
    assert found.version == V
    assert found.summary.startswith(dist.MARK)
    assert dist.installed("no-such-distribution-for-ratchet") is None


# --- the wiring, in child interpreters ---------------------------------------------------------

CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
try:
    __import__(sys.argv[2])
except ImportError as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps(None))
"""


def fake_core_metadata(tmp_path: Path, version: str, summary: str) -> Path:
    site = tmp_path / "site"
    info = site / f"ratchet_core-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: ratchet-core\nVersion: {version}\nSummary: {summary}\n",
        encoding="utf-8",
    )
    return site


def import_with(site: Path, module: str) -> dict[str, object] | None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(site), module],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=True,
    )
    result: dict[str, object] | None = json.loads(done.stdout)
    return result


def test_import_ratchet_refuses_the_other_projects_metadata(tmp_path: Path) -> None:
    site = fake_core_metadata(tmp_path, FOREIGN.version, FOREIGN.summary)
    failure = import_with(site, "ratchet")
    assert failure is not None
    assert failure["type"] == "RatchetInstallError"
    assert str(failure["message"]).startswith("the installed ratchet-core 0.1.0 is another project")


def test_import_ratchet_accepts_matching_metadata(tmp_path: Path) -> None:
    site = fake_core_metadata(tmp_path, V, OURS.summary)
    assert import_with(site, "ratchet") is None


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
def test_each_adapter_in_a_checkout_refuses_stale_core_metadata(
    tmp_path: Path, module: str
) -> None:
    # In a source checkout an adapter has no copy of the check module (its wheel gets one at
    # build time, see test_wheelhouse_install.py) and uses the workspace's own ``ratchet``,
    # whose import refuses metadata of another version and says how to repair the checkout.
    site = fake_core_metadata(tmp_path, "0.1.5", OURS.summary)
    failure = import_with(site, module)
    assert failure is not None
    assert failure["type"] == "RatchetInstallError"
    assert str(failure["message"]).startswith(
        f"the installed ratchet-core metadata says 0.1.5 but its 'ratchet' package is {V} "
        "(a stale or mixed install; in a checkout run `uv sync`)"
    )
