"""Settings from arguments, RATCHET_* variables and a TOML file: precedence, parsing, errors,
and the table of docs/configuration.md."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.errors import ConfigurationError
from ratchet.settings import _fields, load_settings, parse_value, shown_value

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def source(settings: object, name: str) -> str:
    return next(e.source for e in settings.entries if e.name == name)  # type: ignore[attr-defined]


def test_argument_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    file = tmp_path / "r.toml"
    file.write_text("[ratchet]\nconcurrency = 3\nbatch_size = 7\nprefetch = 2\n")
    env = {"RATCHET_CONCURRENCY": "5", "RATCHET_BATCH_SIZE": "9", "RATCHET_CONFIG_FILE": str(file)}
    settings = load_settings({"concurrency": 11}, environ=env)
    config = settings.worker_config()
    assert (config.concurrency, config.batch_size, config.prefetch) == (11, 9, 2)
    assert source(settings, "concurrency") == "argument"
    assert source(settings, "batch_size") == "env RATCHET_BATCH_SIZE"
    assert source(settings, "prefetch") == f"file {file}"
    assert source(settings, "max_takeovers") == "default"
    assert load_settings({"concurrency": None}, environ=env).worker_config().concurrency == 5


def test_an_empty_variable_counts_as_unset() -> None:
    settings = load_settings(environ={"RATCHET_CONCURRENCY": "", "RATCHET_NODE_NAME": ""})
    assert settings.get("concurrency") == 64 and source(settings, "concurrency") == "default"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30),
        ("0.5", 0.5),
        ("250ms", 0.25),
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        (" 7 s ", 7),
        (".5", 0.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_value(timedelta, text, "x") == timedelta(seconds=seconds)


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_a_duration_round_trips_through_its_seconds(seconds: float) -> None:
    parsed = parse_value(timedelta, repr(seconds), "x")
    assert abs(parsed.total_seconds() - seconds) <= 1e-6 * max(1.0, seconds)


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("RATCHET_CONCURRENCY", "ten", "RATCHET_CONCURRENCY: 'ten' is not an integer"),
        (
            "RATCHET_HEARTBEAT_INTERVAL",
            "soon",
            "RATCHET_HEARTBEAT_INTERVAL: 'soon' is not a duration",
        ),
        ("RATCHET_HEARTBEAT_INTERVAL", "-5", "is not a duration"),
        ("RATCHET_WATCHER_ENABLED", "maybe", "RATCHET_WATCHER_ENABLED: 'maybe' is not a boolean"),
        ("RATCHET_RESOURCE_LIMITS", "[1]", "RATCHET_RESOURCE_LIMITS: '[1]' is not a JSON object"),
        ("RATCHET_CONCURRENCY", "0", "RATCHET_CONCURRENCY (env RATCHET_CONCURRENCY)"),
        ("RATCHET_SANITIZE_KEYS", "pass word", "invalid app settings"),
    ],
)
def test_bad_values_name_the_variable(var: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        load_settings(environ={var: value})


def test_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    file = tmp_path / "r.toml"
    file.write_text("concurency = 4\n")
    with pytest.raises(ConfigurationError, match="unknown setting concurency"):
        load_settings(environ={}, config_file=file)
    file.write_text('heartbeat_interval = "often"\n')
    with pytest.raises(ConfigurationError, match=r"key 'heartbeat_interval'"):
        load_settings(environ={}, config_file=file)
    file.write_text("concurrency = = 4\n")
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        load_settings(environ={}, config_file=file)
    with pytest.raises(ConfigurationError, match="cannot read config file"):
        load_settings(environ={}, config_file=tmp_path / "missing.toml")
    with pytest.raises(ConfigurationError, match="argument: unknown setting colour"):
        load_settings({"colour": "red"}, environ={})


def test_file_values_take_their_toml_types(tmp_path: Path) -> None:
    file = tmp_path / "r.toml"
    file.write_text(
        'allowed_modules = ["a", "b"]\nwatcher_enabled = false\norphan_grace = 45\n'
        "[breaker_profiles.FAST]\nwait = 5\n"
    )
    settings = load_settings(environ={}, config_file=file)
    app = settings.app_config()
    assert app.allowed_modules == ("a", "b") and app.breaker_profiles == {"FAST": {"wait": 5}}
    worker = settings.worker_config()
    assert worker.watcher_enabled is False and worker.orphan_grace == timedelta(seconds=45)


def test_the_app_is_built_from_the_settings(tmp_path: Path) -> None:
    env = {
        "RATCHET_URL": f"sqlite:///{tmp_path / 'a.db'}",
        "RATCHET_ALLOWED_MODULES": "m1, m2",
        "RATCHET_NODE_NAME": "web-7",
        "RATCHET_SANITIZE_EMAILS": "off",
    }
    app = load_settings(environ=env).app()
    try:
        assert app.config.allowed_modules == ("m1", "m2") and app.node_name == "web-7"
        assert app.config.sanitize_policy().emails is False
    finally:
        app.close()


def test_secrets_are_hidden_when_shown() -> None:
    assert shown_value("url", "postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert shown_value("url", "redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert shown_value("api_token", "abc") == "***"
    assert shown_value("heartbeat_interval", timedelta(seconds=5)) == 5.0


def test_the_documentation_lists_every_setting_once() -> None:
    documented = re.findall(r"^\| `(RATCHET_[A-Z_]+)` \|", DOC.read_text(), re.MULTILINE)
    assert documented == [f"RATCHET_{name.upper()}" for name, *_ in _fields()]


def test_pool_sizes_are_connection_settings_passed_to_the_store(tmp_path: Path) -> None:
    settings = load_settings(environ={"RATCHET_POOL_SIZE": "4"})
    assert settings.pool_options() == {"pool_size": 4}
    assert load_settings(environ={}).pool_options() == {}
    with pytest.raises(ConfigurationError, match="RATCHET_MAX_OVERFLOW: -1 is below 0"):
        load_settings(environ={"RATCHET_MAX_OVERFLOW": "-1"})
    with pytest.raises(ConfigurationError, match="RATCHET_POOL_SIZE: 'many' is not an integer"):
        load_settings(environ={"RATCHET_POOL_SIZE": "many"})
    url = f"sqlite:///{tmp_path / 'p.db'}"
    env = {"RATCHET_URL": url, "RATCHET_POOL_SIZE": "3", "RATCHET_ALLOW_EMPTY_CLASS_POLICY": "1"}
    app = load_settings(environ=env).app(auto_migrate=True)
    try:
        assert app.store.engine.pool.size() == 3  # type: ignore[attr-defined]
    finally:
        app.close()
