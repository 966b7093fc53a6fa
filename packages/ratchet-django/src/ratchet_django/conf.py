"""``settings.RATCHET``: which database holds Ratchet's tables and how the app is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

#: The keys ``settings.RATCHET`` may hold.
KEYS = frozenset(
    {"DATABASE", "ALLOWED_MODULES", "COORDINATOR", "OPTIONS", "WORKER", "MIGRATE_WITH_DJANGO"}
)


@dataclass(frozen=True)
class RatchetSettings:
    """The parsed ``settings.RATCHET``.

    ``database`` is the alias in ``DATABASES`` whose database holds the scheduler's tables; jobs
    submitted through this app join that connection's transaction. ``allowed_modules`` is the
    class policy (``ratchet_django`` is always added); ``options`` go to ``Ratchet(...)`` as
    keyword arguments, ``worker`` to ``WorkerConfig``.
    """

    database: str = "default"
    allowed_modules: tuple[str, ...] = ()
    coordinator: str = "local"
    options: dict[str, Any] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)
    migrate_with_django: bool = True


def parse(raw: Any, databases: Any) -> RatchetSettings:
    """Check ``raw`` (the value of ``settings.RATCHET``) against ``databases``.

    :raises ImproperlyConfigured: an unknown key, a wrong type or an alias not in ``DATABASES``.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"settings.RATCHET must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"settings.RATCHET has unknown keys {unknown}; known keys: {sorted(KEYS)}"
        )
    database = raw.get("DATABASE", "default")
    if database not in databases:
        raise ImproperlyConfigured(
            f"settings.RATCHET['DATABASE'] is {database!r}, which is not in DATABASES "
            f"({sorted(databases)})"
        )
    modules = raw.get("ALLOWED_MODULES", ())
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        raise ImproperlyConfigured(
            "settings.RATCHET['ALLOWED_MODULES'] must be a list of module prefixes, "
            f"got {modules!r}"
        )
    for key in ("OPTIONS", "WORKER"):
        if not isinstance(raw.get(key, {}), dict):
            raise ImproperlyConfigured(f"settings.RATCHET[{key!r}] must be a dict")
    return RatchetSettings(
        database=database,
        allowed_modules=tuple(modules),
        coordinator=str(raw.get("COORDINATOR", "local")),
        options=dict(raw.get("OPTIONS", {})),
        worker=dict(raw.get("WORKER", {})),
        migrate_with_django=bool(raw.get("MIGRATE_WITH_DJANGO", True)),
    )


def current() -> RatchetSettings:
    """The project's ``settings.RATCHET``, parsed."""
    from django.conf import settings

    return parse(getattr(settings, "RATCHET", None), settings.DATABASES)
