"""Import-time check that the installed ``ratchet-core`` is Ratchet for Python at the right version.

A different project on the public package index is also named ``ratchet-core`` and also installs
an import package called ``ratchet``. If a user gets that one, or a ``ratchet-core`` of another
version than an adapter was built for, the error would otherwise show up far from its cause, for
example as a missing name deep inside an adapter. These checks report it at import time as a
single line that says what is installed, what is expected and how to install the right thing.

``import ratchet`` calls :func:`check_core`, and each adapter's ``__init__`` calls
:func:`check_adapter` before it imports anything from ``ratchet``. Every adapter ships its own
verbatim copy of this module (``tests/packaging/test_versions.py`` keeps the copies identical).
It has to: when the installed ``ratchet`` is the other project's, an adapter cannot import this
module from it. Only the standard library is used, and one distribution's metadata is read per
call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

CORE = "ratchet-core"
#: Every Ratchet for Python distribution's summary starts with this text. The other
#: ``ratchet-core`` has a different summary.
MARK = "Ratchet for Python"
#: Where ``python3 dev.py wheels`` writes the wheels, relative to a checkout.
WHEELHOUSE = "dist/wheelhouse"


class RatchetInstallError(ImportError):
    """The installed ``ratchet-core`` is another project's or another version than needed."""


@dataclass(frozen=True)
class Installed:
    """The parts of an installed distribution's metadata that the checks read."""

    version: str
    summary: str


Lookup = Callable[[str], Installed | None]


def installed(distribution: str) -> Installed | None:
    """Return the installed ``distribution``'s version and summary, or None if it has none."""
    from importlib import metadata

    try:
        meta = metadata.metadata(distribution)
    except metadata.PackageNotFoundError:
        return None

    def field(name: str) -> str:
        values = meta.get_all(name)
        return str(values[0]) if values else ""

    return Installed(field("Version"), field("Summary"))


def install_line(version: str, *distributions: str) -> str:
    """Return the command that installs the given distributions at ``version`` from a wheelhouse."""
    pins = " ".join(f'"{name}=={version}"' for name in (CORE, *distributions))
    return (
        f"pip install --find-links {WHEELHOUSE} {pins} "
        f"({WHEELHOUSE} is built by `python3 dev.py wheels` in a Ratchet for Python checkout)"
    )


def _foreign(found: Installed) -> str:
    return (
        f"the installed {CORE} {found.version} is another project ({found.summary!r}) "
        "that also uses the import name 'ratchet'"
    )


def core_problem(version: str, found: Installed | None) -> str | None:
    """Describe what is wrong with the installed ``ratchet-core``, or return None if nothing is.

    ``version`` is the version of the ``ratchet`` package being imported. None for ``found``
    means there is no ``ratchet-core`` metadata at all, which is the case when the code runs
    from a source tree: nothing contradicts it then.
    """
    if found is None:
        return None
    if not found.summary.startswith(MARK):
        return f"{_foreign(found)}; expected Ratchet for Python {version}: {install_line(version)}"
    if found.version != version:
        return (
            f"the installed {CORE} metadata says {found.version} but its 'ratchet' package is "
            f"{version} (a stale or mixed install; in a checkout run `uv sync`): "
            f"{install_line(version)}"
        )
    return None


def adapter_problem(adapter: str, version: str, found: Installed | None) -> str | None:
    """Describe why ``adapter`` at ``version`` cannot use the installed ``ratchet-core``, or None.

    Adapters pin ``ratchet-core`` to exactly their own version. With no ``ratchet-core`` metadata
    (a source tree), there is nothing to compare and the check passes.
    """
    if found is None:
        return None
    if not found.summary.startswith(MARK):
        what = _foreign(found)
    elif found.version != version:
        what = f"the installed {CORE} is {found.version}"
    else:
        return None
    return (
        f"{adapter} {version} needs {CORE}=={version}, but {what}; "
        f"install matching versions: {install_line(version, adapter)}"
    )


def check_core(version: str, lookup: Lookup = installed) -> None:
    """Raise :class:`RatchetInstallError` if ``ratchet-core`` is not this project at ``version``."""
    problem = core_problem(version, lookup(CORE))
    if problem is not None:
        raise RatchetInstallError(problem, name="ratchet")


def check_adapter(adapter: str, version: str, lookup: Lookup = installed) -> None:
    """Raise :class:`RatchetInstallError` if ``adapter`` cannot use the installed ``ratchet-core``."""
    problem = adapter_problem(adapter, version, lookup(CORE))
    if problem is not None:
        raise RatchetInstallError(problem, name="ratchet")
