"""The distributions are one release, and what each takes from another is taken, not copied.

The version number lives in each distribution's pyproject.toml and ``__version__``, and in the
exact pin ``ratchet-core==X`` of every other distribution. ``dev.py`` owns the check, so
``python3 dev.py wheels`` refuses to build a mixed release; these tests run the same check.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest
from devscript import load_dev

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = {
    "ratchet-postgres": "ratchet_postgres",
    "ratchet-mysql": "ratchet_mysql",
    "ratchet-redis-coordinator": "ratchet_redis_coordinator",
    "ratchet-django": "ratchet_django",
    "ratchet-dashboard": "ratchet_dashboard",
}


dev = load_dev()


def test_dev_knows_every_workspace_member() -> None:
    members = {path.name for path in (ROOT / "packages").iterdir() if path.is_dir()}
    assert set(dev.DISTRIBUTIONS) == members
    assert set(ADAPTERS) == members - {"ratchet-core"}


def test_all_distributions_are_one_release() -> None:
    assert dev.version_problems() == []


def copy_tree(tmp_path: Path) -> Path:
    for name, package in dev.DISTRIBUTIONS.items():
        source = ROOT / "packages" / name
        target = tmp_path / "packages" / name
        (target / "src" / package).mkdir(parents=True)
        shutil.copy(source / "pyproject.toml", target / "pyproject.toml")
        init = source / "src" / package / "__init__.py"
        shutil.copy(init, target / "src" / package / "__init__.py")
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def current_version() -> str:
    match = re.search(
        r'^version = "([^"]+)"$',
        (ROOT / "packages/ratchet-core/pyproject.toml").read_text(),
        re.MULTILINE,
    )
    assert match
    return match.group(1)


def test_a_bumped_core_alone_is_reported(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    version = current_version()
    edit(root / "packages/ratchet-core/pyproject.toml", f'"{version}"', '"9.9.9"')
    edit(root / "packages/ratchet-core/src/ratchet/__init__.py", f'"{version}"', '"9.9.9"')
    problems = dev.version_problems(root)
    # Each adapter: its version, its __version__ and its pin all lag behind.
    assert len(problems) == 3 * len(ADAPTERS)
    assert f"ratchet-postgres is version {version}, ratchet-core is 9.9.9" in problems


def test_a_loose_pin_is_reported(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    version = current_version()
    edit(
        root / "packages/ratchet-mysql/pyproject.toml",
        f'"ratchet-core=={version}"',
        f'"ratchet-core>={version}"',
    )
    assert dev.version_problems(root) == [
        f"ratchet-mysql depends on ['ratchet-core>={version}'], expected ratchet-core=={version}"
    ]


def test_a_stale_dunder_version_is_reported(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    version = current_version()
    init = root / "packages/ratchet-redis-coordinator/src/ratchet_redis_coordinator/__init__.py"
    edit(init, f'__version__ = "{version}"', '__version__ = "0.0.1"')
    assert dev.version_problems(root) == [
        f"ratchet_redis_coordinator.__version__ is ['0.0.1'], expected {version!r}"
    ]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_each_adapter_wheel_takes_the_install_check_from_the_core(name: str) -> None:
    """The check module exists once in the tree; each adapter's wheel gets a copy at build time
    (the wheels' contents are checked in test_wheelhouse_install.py)."""
    project = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())
    included = project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert included == {
        "../ratchet-core/src/ratchet/_distribution.py": f"{ADAPTERS[name]}/_distribution.py"
    }
    assert not (ROOT / "packages" / name / "src" / ADAPTERS[name] / "_distribution.py").exists()


@pytest.mark.parametrize("name", sorted(dev.DISTRIBUTIONS))
def test_each_distribution_carries_the_license(name: str) -> None:
    # hatchling puts the LICENSE next to pyproject.toml into the wheel; a symlink would break
    # the sdist, so these are copies.
    assert (ROOT / "packages" / name / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()


@pytest.mark.parametrize("name", sorted(dev.DISTRIBUTIONS))
def test_package_readmes_have_no_links_that_break_on_an_index_page(name: str) -> None:
    # An index page shows the README alone: a link relative to the repository leads nowhere.
    text = (ROOT / "packages" / name / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]*)\)", text)
    assert [t for t in targets if not t.startswith("https://")] == []


def documents() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "packages").glob("*/README.md")),
    ]


@pytest.mark.parametrize("name", sorted(dev.DISTRIBUTIONS))
def test_each_package_readme_says_how_to_install_it(name: str) -> None:
    text = (ROOT / "packages" / name / "README.md").read_text()
    assert re.search(rf"^pip install --find-links dist/wheelhouse .*\"{name}[\[=]", text, re.M)


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_documented_installs_use_the_wheelhouse_and_the_current_version(path: Path) -> None:
    # Anything else would install the other project's ratchet-core, or fail.
    version = current_version()
    commands = re.findall(r"pip install [^`\n#]*", path.read_text())
    for command in [c for c in commands if "ratchet" in c]:
        assert command.startswith("pip install --find-links dist/wheelhouse "), command
        names = re.findall(r"ratchet-[a-z-]+(?:\[[a-z]+\])?(?:==)?[0-9a-z.]*", command)
        assert names, command
        for pinned in names:
            assert pinned.endswith(f"=={version}"), f"{pinned} in {command}"
