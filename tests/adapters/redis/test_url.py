"""URL parsing, TLS flag and password redaction (no server needed)."""

from __future__ import annotations

import logging

import pytest

from ratchet.domain.errors import ConfigurationError
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.testing.servers import free_port
from ratchet_redis_coordinator import (
    CoordinatorState,
    RedisClusterCoordinator,
    channel_name,
    parse_url,
    redact_url,
)

SECRET = "Sup3r-Secret!pw"
QUOTED = "Sup3r-Secret%21pw"


def test_defaults() -> None:
    s = parse_url("redis://localhost:6379/0")
    assert s.cluster == "default"
    assert s.channel == "ratchet:default:wakeup"
    assert not s.tls
    assert s.password is None
    assert (s.reconnect_min, s.reconnect_max) == (0.1, 5.0)


def test_cluster_from_the_query_and_the_argument() -> None:
    assert parse_url("redis://h/0?cluster=shop").channel == "ratchet:shop:wakeup"
    assert parse_url("redis://h/0", cluster="billing").cluster == "billing"
    assert parse_url("redis://h/0?cluster=shop", cluster="shop").cluster == "shop"
    assert channel_name("a.b-c_d:1") == "ratchet:a.b-c_d:1:wakeup"


def test_disagreeing_cluster_names_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="disagrees"):
        parse_url("redis://h/0?cluster=shop", cluster="billing")


@pytest.mark.parametrize("name", ["", "has space", "x" * 101, "ünïcode", "a/b"])
def test_bad_cluster_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="cluster name"):
        parse_url("redis://h/0", cluster=name)


def test_tls_flag_follows_the_scheme() -> None:
    assert parse_url("rediss://h:6380/0").tls
    assert parse_url("REDISS://h:6380/0").tls
    assert not parse_url("redis://h:6380/0").tls


def test_own_parameters_are_removed_and_the_others_kept() -> None:
    s = parse_url(
        "rediss://h:1/2?cluster=c&reconnect_min=0.2&reconnect_max=3&ssl_cert_reqs=none"
        "&socket_timeout=0.25"
    )
    assert (s.reconnect_min, s.reconnect_max) == (0.2, 3.0)
    assert s.url == "rediss://h:1/2?ssl_cert_reqs=none&socket_timeout=0.25"


@pytest.mark.parametrize(
    "url",
    [
        "http://h/0",
        "redis:///0",
        "redis://h:notaport/0",
        "redis://h/0?reconnect_max=0",
        "redis://h/0?reconnect_min=5&reconnect_max=1",
        "redis://h/0?reconnect_min=abc",
        "redis://h/0?cluster=a&cluster=b",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_url(url)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://:{QUOTED}@h:6379/0", "redis://:***@h:6379/0"),
        (f"redis://alice:{QUOTED}@h:6379/0", "redis://alice:***@h:6379/0"),
        (f"rediss://{QUOTED}@h/0?cluster=x", "rediss://***@h/0?cluster=x"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_the_password_is_read_but_never_shown() -> None:
    for url in (f"redis://:{QUOTED}@h/0", f"redis://bob:{QUOTED}@h/0", f"redis://{QUOTED}@h/0"):
        s = parse_url(url)
        assert s.password == SECRET
        for text in (repr(s), str(s), s.redacted_url):
            assert SECRET not in text and QUOTED not in text


@pytest.mark.parametrize(
    "url",
    [
        f"http://:{QUOTED}@h/0",
        f"redis://:{QUOTED}@h:port/0",
        f"redis://:{QUOTED}@h/0?reconnect_max=-1",
        f"redis://:{QUOTED}@h/0?cluster=bad name",
        f"redis://:{QUOTED}@h/0?ssl_cert_reqs=nonsense&socket_timeout=x",
    ],
)
def test_error_messages_do_not_show_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        RedisClusterCoordinator(url, startup_wait=0)
    assert SECRET not in str(info.value) and QUOTED not in str(info.value)
    assert "***" in str(info.value)


def test_an_unreachable_redis_logs_and_reprs_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"redis://alice:{QUOTED}@127.0.0.1:{free_port()}/0?reconnect_min=0.01&reconnect_max=0.02"
    coordinator = RedisClusterCoordinator(url, startup_wait=5)
    try:
        assert coordinator.state is CoordinatorState.RECONNECTING
        assert SECRET not in repr(coordinator) and QUOTED not in repr(coordinator)
        assert "alice:***@" in repr(coordinator)
    finally:
        coordinator.close()
    assert coordinator.state is CoordinatorState.CLOSED
    assert caplog.records, "the outage was not logged"
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert SECRET not in text and QUOTED not in text


def test_registered_under_redis_and_rediss() -> None:
    plugins = Plugins(make_plugin_manager())
    for spec in ("redis://h/0", "rediss://h/0"):
        factory = plugins.coordinator_factory(spec)
        assert plugins.coordinators.owner(spec.split(":")[0]) == "redis-coordinator"
        assert callable(factory)
