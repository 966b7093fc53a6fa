"""rediss:// with an ACL user and password against a TLS-enabled redis-server."""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint
from ratchet.testing.coordinator_contract import Recorder, unique
from ratchet.testing.pytest_plugin import backend_unavailable
from ratchet.testing.servers import RedisServer, ServerError, free_port
from ratchet_redis_coordinator import CoordinatorState, RedisClusterCoordinator

pytestmark = pytest.mark.redis
USER = "ratchet"
SECRET = "tls-Pa55word"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (``openssl req``); (cert, key)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
    command += ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


class TlsRedis:
    def __init__(self, server: RedisServer, tls_port: int, ca: Path) -> None:
        self.server, self.tls_port, self.ca = server, tls_port, ca

    def url(self, password: str = SECRET) -> str:
        return (
            f"rediss://{USER}:{password}@127.0.0.1:{self.tls_port}/0"
            f"?ssl_ca_certs={self.ca}&cluster=tls-{unique('c')}&reconnect_max=0.2"
        )


@pytest.fixture(scope="module")
def tls_redis(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsRedis]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (needed to make a test certificate)")
    cert, key = make_certificate(tmp_path_factory.mktemp("tls"))
    tls_port = free_port()
    tls = ["--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    tls += ["--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]
    acl = ["--user", USER, "on", f">{SECRET}", "~*", "&*", "+@all"]
    server = RedisServer(options=[*tls, *acl])
    try:
        server.start()
    except (ServerError, OSError) as exc:
        server.cleanup()
        backend_unavailable(request.config, "redis", f"TLS redis-server: {exc}")
    try:
        yield TlsRedis(server, tls_port, cert)
    finally:
        server.cleanup()


def test_hints_travel_over_tls_with_a_password(tls_redis: TlsRedis) -> None:
    url = tls_redis.url()
    a = RedisClusterCoordinator(url)
    b = RedisClusterCoordinator(url)
    try:
        assert a.settings.tls
        assert a.state is b.state is CoordinatorState.CONNECTED
        recorder = Recorder()
        b.add_listener(recorder)
        origin = unique("tls")
        a.notify_new_work(WakeupHint(JobPriority.CRITICAL, origin))
        assert recorder.wait_for(origin, 5) is not None
        assert SECRET not in repr(a)
    finally:
        a.close()
        b.close()


def test_a_wrong_password_is_reported_without_any_password(
    tls_redis: TlsRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "Wr0ng-Secret-xyz"
    node = RedisClusterCoordinator(tls_redis.url(password=wrong))
    try:
        assert node.state is CoordinatorState.RECONNECTING
        node.notify_new_work(WakeupHint(JobPriority.NORMAL, "x"))
    finally:
        node.close()
    messages = caplog.text + "".join(str(r.args) + str(r.exc_info) for r in caplog.records)
    assert "cannot reach" in messages
    assert wrong not in messages and SECRET not in messages


def test_plain_tcp_to_the_tls_port_fails_softly(tls_redis: TlsRedis) -> None:
    url = tls_redis.url().replace("rediss://", "redis://", 1).split("?")[0]
    node: Any = RedisClusterCoordinator(url, startup_wait=3)
    try:
        assert node.state is CoordinatorState.RECONNECTING
    finally:
        node.close()
