"""Settings from arguments, ``RATCHET_*`` environment variables and a TOML file.

Every field of :class:`~ratchet.config.RatchetConfig` and :class:`~ratchet.config.WorkerConfig`,
plus the store URL and the coordinator, can be set as ``RATCHET_<FIELD>`` (``RATCHET_URL``,
``RATCHET_CONCURRENCY``, ``RATCHET_HEARTBEAT_INTERVAL``...) or as ``<field> = value`` in the TOML
file named by ``RATCHET_CONFIG_FILE`` (or passed as ``config_file``). The precedence is
argument > environment > file > default. Durations are seconds (``30``, ``0.5``) or a number
with a unit (``250ms``, ``30s``, ``5m``, ``2h``, ``1d``); lists are comma-separated in the
environment and arrays in the file; mappings are JSON in the environment and tables in the
file. A bad value raises :class:`~ratchet.domain.errors.ConfigurationError` naming the variable
or the file and key. See docs/configuration.md.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratchet.config import RatchetConfig, WorkerConfig
from ratchet.domain.errors import ConfigurationError

if TYPE_CHECKING:
    from ratchet.engine.app import Ratchet

PREFIX = "RATCHET_"
CONFIG_FILE_ENV = "RATCHET_CONFIG_FILE"

#: Settings that are neither app nor worker fields: (name, type, default, what it is).
CONNECTION_SETTINGS: tuple[tuple[str, Any, Any, str], ...] = (
    ("url", str, "sqlite:///ratchet.db", "Database URL of the store (SQLAlchemy form)."),
    ("coordinator", str, "local", "Wake-up coordinator name or URL."),
    (
        "pool_size",
        int | None,
        None,
        "Connections a process keeps in its store pool (default 10 on PostgreSQL and MySQL; "
        "idle ones beyond the first close after 30 s); not used by SQLite.",
    ),
    (
        "max_overflow",
        int | None,
        None,
        "Connections opened beyond the pool size under bursts, closed as they come back "
        "(default 20).",
    ),
)
#: The connection settings that go to the store as ``store_options``.
POOL_SETTINGS = ("pool_size", "max_overflow")
#: Fields that only code can set (objects, not values; ``retention`` takes a RetentionSettings).
CODE_ONLY = frozenset({"extra", "retention"})

_DURATION = re.compile(r"^\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SECRET_WORDS = ("password", "secret", "token", "credential", "api_key", "apikey")


@dataclass(frozen=True)
class Setting:
    """One setting: its name, kind, where its value came from and the value."""

    name: str
    scope: str
    """``connection``, ``app`` or ``worker``."""
    kind: Any
    value: Any
    source: str
    """``argument``, ``env RATCHET_X``, ``file PATH`` or ``default``."""
    doc: str

    @property
    def env_var(self) -> str:
        return PREFIX + self.name.upper()


def _fields() -> list[tuple[str, str, Any, Any, str]]:
    """(name, scope, type, default, doc) of every setting, connection settings first."""
    out = [(n, "connection", t, d, doc) for n, t, d, doc in CONNECTION_SETTINGS]
    for scope, cls in (("app", RatchetConfig), ("worker", WorkerConfig)):
        hints = typing.get_type_hints(cls)
        docs = _field_docs(cls)
        for f in fields(cls):
            if f.name in CODE_ONLY:
                continue
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
            out.append((f.name, scope, hints[f.name], default, docs.get(f.name, "")))
    return out


def _field_docs(cls: type) -> dict[str, str]:
    """The first sentence of each field's docstring in ``cls``'s source (empty if none)."""
    import inspect

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    for match in re.finditer(r'^    (\w+): [^\n]*\n    """(.*?)"""', source, re.M | re.S):
        text = " ".join(match.group(2).split())
        docs[match.group(1)] = text.split(". ")[0].rstrip(".") + "."
    return docs


def parse_value(kind: Any, raw: Any, where: str) -> Any:
    """``raw`` (text from the environment, or a TOML value) as a value of type ``kind``.

    :raises ConfigurationError: ``raw`` is not a valid ``kind``; the message names ``where``.
    """
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if isinstance(raw, str) and raw.strip() == "":
            return None
        return parse_value(inner[0], raw, where)
    try:
        if kind is bool:
            return _parse_bool(raw)
        if kind is int:
            if isinstance(raw, bool) or (not isinstance(raw, (int, str))):
                raise ValueError
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is str:
            if not isinstance(raw, str):
                raise ValueError
            return raw
        if kind is timedelta:
            return _parse_duration(raw)
        if origin in (tuple, frozenset):
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return origin(str(i).strip() for i in items if str(i).strip())
        if origin in (Mapping, dict) or kind is dict:
            value = json.loads(raw) if isinstance(raw, str) else raw
            if not isinstance(value, dict):
                raise ValueError
            return value
    except (ValueError, TypeError, OverflowError, json.JSONDecodeError):
        raise ConfigurationError(f"{where}: {raw!r} is not {_describe(kind)}") from None
    raise ConfigurationError(f"{where}: settings of type {kind} cannot be read from text")


def _describe(kind: Any) -> str:
    if kind is bool:
        return "a boolean (true/false, 1/0, yes/no, on/off)"
    if kind is int:
        return "an integer"
    if kind is timedelta:
        return "a duration (seconds, or a number with ms, s, m, h or d: 250ms, 30s, 5m)"
    if typing.get_origin(kind) in (Mapping, dict):
        return "a JSON object"
    return f"a {getattr(kind, '__name__', kind)}"


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError


def _parse_duration(raw: Any) -> timedelta:
    if isinstance(raw, bool):
        raise ValueError
    if isinstance(raw, (int, float)):
        seconds = float(raw)
    else:
        match = _DURATION.match(str(raw))
        if match is None:
            raise ValueError
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError
    return timedelta(seconds=seconds)


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings of a TOML file (top-level keys, or those of a ``[ratchet]`` table).

    :raises ConfigurationError: the file cannot be read or parsed.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {path} is not valid TOML: {exc}") from None
    section = data.get("ratchet", data)
    if not isinstance(section, dict):
        raise ConfigurationError(f"config file {path}: [ratchet] must be a table")
    return {k: v for k, v in section.items() if k != "ratchet"}


@dataclass(frozen=True)
class Settings:
    """The effective settings and where each came from."""

    entries: tuple[Setting, ...]

    def get(self, name: str) -> Any:
        for entry in self.entries:
            if entry.name == name:
                return entry.value
        raise KeyError(name)

    def _scope(self, scope: str, *, only_set: bool = False) -> dict[str, Any]:
        return {
            e.name: e.value
            for e in self.entries
            if e.scope == scope and not (only_set and e.source == "default")
        }

    @property
    def url(self) -> str:
        return str(self.get("url"))

    def app_config(self) -> RatchetConfig:
        """The :class:`RatchetConfig` of these settings.

        :raises ConfigurationError: a value is out of range.
        """
        return RatchetConfig(**self._scope("app"))

    def worker_config(self) -> WorkerConfig:
        """The :class:`WorkerConfig` of these settings.

        :raises ConfigurationError: a value is out of range.
        """
        return WorkerConfig(**self._scope("worker"))

    def app(self, **code: Any) -> Ratchet:
        """A :class:`~ratchet.Ratchet` app with these settings; ``code`` (objects such as
        ``clock`` or ``plugins``) is passed as it is."""
        from ratchet.engine.app import Ratchet

        options = self._scope("app", only_set=True)
        pool = self.pool_options()
        if pool:
            code["store_options"] = {**pool, **(code.get("store_options") or {})}
        return Ratchet(self.url, coordinator=str(self.get("coordinator")), **options, **code)

    def pool_options(self) -> dict[str, int]:
        """``pool_size`` and ``max_overflow`` where they are set (store options).

        :raises ConfigurationError: a size below its minimum (1 and 0).
        """
        pool = {name: self.get(name) for name in POOL_SETTINGS if self.get(name) is not None}
        for name, least in (("pool_size", 1), ("max_overflow", 0)):
            if name in pool and pool[name] < least:
                raise ConfigurationError(
                    f"{PREFIX}{name.upper()}: {pool[name]} is below {least} (see "
                    "docs/configuration.md)"
                )
        return pool

    def describe(self) -> list[dict[str, Any]]:
        """Every setting as ``name``, ``env``, ``value`` (shown form, secrets hidden),
        ``source``: what ``ratchet config show`` prints."""
        return [
            {
                "name": e.name,
                "scope": e.scope,
                "env": e.env_var,
                "value": shown_value(e.name, e.value),
                "source": e.source,
            }
            for e in self.entries
        ]


def shown_value(name: str, value: Any) -> Any:
    """``value`` as it may be printed: URLs without their password, secret-named settings
    hidden, durations in seconds, tuples and sets as lists."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, str) and "://" in value:
        return hide_password(value)
    if any(word in name.lower() for word in _SECRET_WORDS):
        return "***"
    if isinstance(value, Mapping):
        return json.loads(json.dumps(value, default=str))
    return value


def hide_password(url: str) -> str:
    """``url`` with the password of its user part replaced by ``***``."""
    from ratchet.domain.sanitize import SanitizePolicy, redact

    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return redact(url, SanitizePolicy(keys=(), emails=False))


def load_settings(
    arguments: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    config_file: str | Path | None = None,
) -> Settings:
    """The effective settings: each from ``arguments`` if given there (not None), else from
    ``RATCHET_<NAME>`` in ``environ`` (default: ``os.environ``), else from the TOML file
    (``config_file``, else ``RATCHET_CONFIG_FILE``), else the default.

    :raises ConfigurationError: an unknown argument or file key, an unreadable file, or a value
        that is not of the setting's type (the message names the variable or file key).
    """
    arguments = {k: v for k, v in (arguments or {}).items() if v is not None}
    env = os.environ if environ is None else environ
    path = config_file if config_file is not None else env.get(CONFIG_FILE_ENV) or None
    from_file = read_config_file(Path(path)) if path else {}
    specs = _fields()
    known = {name for name, *_ in specs}
    for origin, names in (("argument", arguments), (f"config file {path}", from_file)):
        unknown = sorted(set(names) - known)
        if unknown:
            raise ConfigurationError(
                f"{origin}: unknown setting {', '.join(unknown)} (see docs/configuration.md "
                "for the list)"
            )
    entries = []
    for name, scope, kind, default, doc in specs:
        var = PREFIX + name.upper()
        if name in arguments:
            value, source = arguments[name], "argument"
        elif env.get(var, "") != "":
            value, source = parse_value(kind, env[var], f"environment variable {var}"), f"env {var}"
        elif name in from_file:
            value = parse_value(kind, from_file[name], f"config file {path}, key {name!r}")
            source = f"file {path}"
        else:
            value, source = default, "default"
        entries.append(Setting(name, scope, kind, value, source, doc))
    settings = Settings(tuple(entries))
    settings.pool_options()
    for scope, build in (("app", settings.app_config), ("worker", settings.worker_config)):
        try:
            build()
        except ConfigurationError as exc:
            raise ConfigurationError(f"{_sources(settings, scope)}: {exc}") from None
    return settings


def _sources(settings: Settings, scope: str) -> str:
    """Where the non-default ``scope`` settings came from, for an error message."""
    chosen = [
        f"{e.env_var} ({e.source})"
        for e in settings.entries
        if e.scope == scope and e.source != "default"
    ]
    return f"invalid {scope} settings [{', '.join(chosen) or 'defaults'}]"


def app_from_env(**arguments: Any) -> Ratchet:
    """A :class:`~ratchet.Ratchet` app from ``RATCHET_*`` variables and the config file;
    ``arguments`` win over both. Objects that are not settings (``clock``, ``plugins``,
    ``store_options``, ``retry_policy``, ``auto_migrate``) are passed through.

    :raises ConfigurationError: see :func:`load_settings`.
    """
    passthrough = {
        k: arguments.pop(k)
        for k in ("clock", "plugins", "store_options", "retry_policy", "auto_migrate", "extra")
        if k in arguments
    }
    return load_settings(arguments).app(**passthrough)


def worker_config_from_env(**arguments: Any) -> WorkerConfig:
    """A :class:`~ratchet.config.WorkerConfig` from ``RATCHET_*`` variables and the config
    file; ``arguments`` win over both.

    :raises ConfigurationError: see :func:`load_settings`.
    """
    return load_settings(arguments).worker_config()
