"""Real-server tests of ratchet.testing.servers and of the plugin's backend fixtures.

Each server is reached with its own command-line client (psql, mariadb, redis-cli) built from
the public connection details, so these tests also check that those details are right.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ratchet.testing import pytest_plugin, servers, wait_until
from ratchet.testing.pytest_plugin import backend_unavailable
from ratchet.testing.servers import (
    ExternalServer,
    MariaDBServer,
    PostgresServer,
    RedisServer,
    ServerError,
    ServerStartError,
    ServerUnavailable,
    find_mariadb_binaries,
    find_postgres_binaries,
    find_redis_binaries,
    free_port,
)

AnyServer = PostgresServer | MariaDBServer | RedisServer


# --------------------------------------------------------------------------- helpers


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]


def _uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def _wait_dead(pid: int, timeout: float = 15.0) -> bool:
    return wait_until(lambda: not _alive(pid), timeout, interval=0.1)


def _started(request: pytest.FixtureRequest, server: AnyServer, backend: str) -> AnyServer:
    try:
        return server.start()
    except ServerError as exc:
        server.cleanup()
        backend_unavailable(request.config, backend, str(exc))


def psql(
    server: PostgresServer | ExternalServer, sql: str, *, password: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``sql`` with psql over TCP using the server's public connection details."""
    env = {**os.environ, "PGPASSWORD": password if password is not None else server.password or ""}
    cmd = [str(find_postgres_binaries().psql), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
    cmd += ["-h", server.host, "-p", str(server.port), "-U", server.user or "postgres"]
    cmd += ["-d", server.database, "-c", sql]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)


def mariadb(
    server: MariaDBServer | ExternalServer, sql: str, *, password: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``sql`` with the mariadb client over TCP using the public connection details."""
    env = {**os.environ, "MYSQL_PWD": password if password is not None else server.password or ""}
    cmd = [str(find_mariadb_binaries().client), "--no-defaults", "--protocol=TCP", "-N", "-B"]
    cmd += [f"--host={server.host}", f"--port={server.port}", f"--user={server.user}"]
    cmd += [f"--database={server.database}", f"--execute={sql}"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)


def redis_cli(server: RedisServer | ExternalServer, *args: str) -> str:
    """Run redis-cli against the server's host/port; return stdout stripped."""
    cmd = [str(find_redis_binaries().cli), "-h", server.host, "-p", str(server.port), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.strip()


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


# Own instances: restart/stop tests must not disturb the session-wide servers.


@pytest.fixture(scope="module")
def own_postgres(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    server = PostgresServer()
    _started(request, server, "postgres")
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def own_mariadb(request: pytest.FixtureRequest) -> Iterator[MariaDBServer]:
    server = MariaDBServer()
    _started(request, server, "mysql")
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def own_redis(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    server = RedisServer()
    _started(request, server, "redis")
    yield server
    server.cleanup()


# --------------------------------------------------------------------------- generic


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_external_server_parses_url_and_swaps_driver() -> None:
    ext = ExternalServer("postgres", "postgresql://u%40x:p%2Fw@db.example:6543/app", "psycopg")
    assert (ext.host, ext.port, ext.user, ext.password, ext.database) == (
        "db.example",
        6543,
        "u@x",
        "p/w",
        "app",
    )
    assert ext.url() == "postgresql+psycopg://u%40x:p%2Fw@db.example:6543/app"
    assert ext.url("asyncpg").startswith("postgresql+asyncpg://")
    assert ext.url("") == "postgresql://u%40x:p%2Fw@db.example:6543/app"
    mysql = ExternalServer("mysql", "mysql+pymysql://root@h/db?charset=utf8mb4")
    assert (mysql.port, mysql.password, mysql.url()) == (
        3306,
        None,
        "mysql+pymysql://root@h/db?charset=utf8mb4",
    )
    assert not hasattr(ext, "start") and not hasattr(ext, "stop")
    with pytest.raises(ValueError):
        ExternalServer("redis", "not a url")


def test_missing_postgres_binaries_raise_with_package_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(servers, "_which", lambda name: None)
    monkeypatch.setattr(servers, "_PG_BINDIR_GLOBS", ())
    monkeypatch.delenv("RATCHET_PG_BINDIR", raising=False)
    with pytest.raises(ServerUnavailable, match=r"Debian package 'postgresql'"):
        find_postgres_binaries()
    server = PostgresServer()
    with pytest.raises(ServerUnavailable, match=r"install-test-services\.sh"):
        server.start()
    assert not server.running and server.directory is None
    server.stop()  # harmless


def test_missing_mariadb_and_redis_binaries_raise_with_package_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(servers, "_which", lambda name: None)
    with pytest.raises(ServerUnavailable, match=r"mariadbd.*'mariadb-server'"):
        find_mariadb_binaries()
    with pytest.raises(ServerUnavailable, match=r"redis-server.*'redis-server'"):
        find_redis_binaries()
    with pytest.raises(ServerUnavailable):
        MariaDBServer().start()
    with pytest.raises(ServerUnavailable):
        RedisServer().start()


def test_missing_service_user_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(ServerUnavailable, match=r"'no-such-user-x'.*'postgresql'"):
        servers._service_account("no-such-user-x", "postgresql")


# --------------------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
def test_postgres_fixture_answers_psql(postgres_server: PostgresServer | ExternalServer) -> None:
    out = _ok(psql(postgres_server, "SELECT current_database(), 6 * 7"))
    assert out == f"{postgres_server.database}|42"
    assert postgres_server.url().startswith("postgresql+psycopg://")
    if isinstance(postgres_server, PostgresServer):
        assert postgres_server.database == "ratchet_test"
        assert postgres_server.url() == (
            f"postgresql+psycopg://postgres:{postgres_server.password}"
            f"@127.0.0.1:{postgres_server.port}/ratchet_test"
        )
        assert postgres_server.url("").startswith("postgresql://postgres:")


@pytest.mark.postgres
def test_postgres_is_tuned_local_and_password_protected(own_postgres: PostgresServer) -> None:
    out = _ok(
        psql(
            own_postgres,
            "SELECT current_setting('fsync'), current_setting('synchronous_commit'), "
            "current_setting('full_page_writes'), current_setting('max_connections'), "
            "current_setting('listen_addresses')",
        )
    )
    assert out == "off|off|off|200|127.0.0.1"
    wrong = psql(own_postgres, "SELECT 1", password="wrong")
    assert wrong.returncode != 0
    assert "password authentication failed" in wrong.stderr
    assert own_postgres.pid is not None
    if os.geteuid() == 0:
        assert _uid_of(own_postgres.pid) == pwd.getpwnam("postgres").pw_uid


@pytest.mark.postgres
def test_postgres_restart_keeps_port_and_data(own_postgres: PostgresServer) -> None:
    _ok(psql(own_postgres, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')"))
    port, pid = own_postgres.port, own_postgres.pid
    own_postgres.restart()
    assert own_postgres.port == port and own_postgres.pid != pid
    assert _ok(psql(own_postgres, "SELECT v FROM kept")) == "hello"


@pytest.mark.postgres
def test_postgres_stop_is_idempotent_and_start_reuses_port(own_postgres: PostgresServer) -> None:
    port, pid = own_postgres.port, own_postgres.pid
    assert pid is not None
    own_postgres.stop()
    own_postgres.stop()
    assert not own_postgres.running and not _accepts(port)
    assert _wait_dead(pid)
    own_postgres.start()
    assert own_postgres.port == port
    assert _ok(psql(own_postgres, "SELECT count(*) FROM kept")) == "1"


@pytest.mark.postgres
def test_postgres_comes_back_after_kill(own_postgres: PostgresServer) -> None:
    pid = own_postgres.pid
    assert pid is not None
    own_postgres.kill()
    own_postgres.kill()
    assert _wait_dead(pid) and not _accepts(own_postgres.port)
    own_postgres.start()  # crash recovery on the same data directory
    assert _ok(psql(own_postgres, "SELECT 1")) == "1"


# --------------------------------------------------------------------------- MariaDB


@pytest.mark.mysql
def test_mariadb_fixture_answers_mariadb_client(
    mariadb_server: MariaDBServer | ExternalServer,
) -> None:
    out = _ok(mariadb(mariadb_server, "SELECT DATABASE(), 6 * 7"))
    assert out == f"{mariadb_server.database}\t42"
    assert mariadb_server.url().startswith("mysql+pymysql://")
    if isinstance(mariadb_server, MariaDBServer):
        assert mariadb_server.url() == (
            f"mysql+pymysql://root:{mariadb_server.password}@127.0.0.1:{mariadb_server.port}"
            "/ratchet_test?charset=utf8mb4"
        )


@pytest.mark.mysql
def test_mariadb_is_tuned_local_and_password_protected(own_mariadb: MariaDBServer) -> None:
    out = _ok(
        mariadb(
            own_mariadb,
            "SELECT @@innodb_flush_log_at_trx_commit, @@log_bin, @@max_connections, "
            "@@bind_address, @@character_set_server, "
            "(SELECT DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA "
            "WHERE SCHEMA_NAME = DATABASE())",
        )
    )
    assert out.split("\t") == ["0", "0", "300", "127.0.0.1", "utf8mb4", "utf8mb4"]
    for password in ("", "wrong"):
        denied = mariadb(own_mariadb, "SELECT 1", password=password)
        assert denied.returncode != 0
        assert "Access denied" in denied.stderr
    assert own_mariadb.pid is not None
    if os.geteuid() == 0:
        assert _uid_of(own_mariadb.pid) == pwd.getpwnam("mysql").pw_uid


@pytest.mark.mysql
def test_mariadb_restart_keeps_port_and_data(own_mariadb: MariaDBServer) -> None:
    _ok(mariadb(own_mariadb, "CREATE TABLE kept (v VARCHAR(20)); INSERT INTO kept VALUES ('hi')"))
    port, pid = own_mariadb.port, own_mariadb.pid
    own_mariadb.restart()
    assert own_mariadb.port == port and own_mariadb.pid != pid
    assert _ok(mariadb(own_mariadb, "SELECT v FROM kept")) == "hi"


@pytest.mark.mysql
def test_mariadb_stop_is_idempotent_and_start_reuses_port(own_mariadb: MariaDBServer) -> None:
    port, pid = own_mariadb.port, own_mariadb.pid
    assert pid is not None
    own_mariadb.stop()
    own_mariadb.stop()
    assert not own_mariadb.running and not _accepts(port)
    assert _wait_dead(pid)
    own_mariadb.start()
    assert own_mariadb.port == port
    assert _ok(mariadb(own_mariadb, "SELECT COUNT(*) FROM kept")) == "1"


# --------------------------------------------------------------------------- Redis


@pytest.mark.redis
def test_redis_fixture_answers_redis_cli(redis_server: RedisServer | ExternalServer) -> None:
    assert redis_cli(redis_server, "ping") == "PONG"
    assert redis_cli(redis_server, "set", "ratchet:infra", "v") == "OK"
    assert redis_cli(redis_server, "get", "ratchet:infra") == "v"
    assert redis_server.url() == f"redis://{redis_server.host}:{redis_server.port}/0"


@pytest.mark.redis
def test_redis_is_not_persisting_and_local(own_redis: RedisServer) -> None:
    save = redis_cli(own_redis, "config", "get", "save").splitlines()
    assert save[0] == "save" and save[1:] in ([], [""])
    assert redis_cli(own_redis, "config", "get", "appendonly").splitlines()[1] == "no"
    assert redis_cli(own_redis, "config", "get", "bind").splitlines()[1] == "127.0.0.1"
    with pytest.raises(ValueError):
        own_redis.url("hiredis")


@pytest.mark.redis
def test_redis_restart_keeps_port_and_data(own_redis: RedisServer) -> None:
    redis_cli(own_redis, "set", "kept", "yes")
    port, pid = own_redis.port, own_redis.pid
    own_redis.restart()
    assert own_redis.port == port and own_redis.pid != pid
    assert redis_cli(own_redis, "get", "kept") == "yes"


@pytest.mark.redis
def test_redis_stop_is_idempotent_and_kill_loses_unsaved_data(own_redis: RedisServer) -> None:
    port, pid = own_redis.port, own_redis.pid
    assert pid is not None
    own_redis.stop()
    own_redis.stop()
    assert not own_redis.running and not _accepts(port)
    assert _wait_dead(pid)
    own_redis.start()
    assert redis_cli(own_redis, "get", "kept") == "yes"
    redis_cli(own_redis, "set", "unsaved", "1")
    own_redis.kill()
    own_redis.start()
    assert redis_cli(own_redis, "exists", "unsaved") == "0"


# --------------------------------------------------------------------------- start failures


def _need(request: pytest.FixtureRequest, backend: str, finder: Callable[[], object]) -> None:
    try:
        finder()
    except ServerUnavailable as exc:
        backend_unavailable(request.config, backend, str(exc))


@pytest.mark.postgres
def test_postgres_start_failure_reports_log_tail(request: pytest.FixtureRequest) -> None:
    _need(request, "postgres", find_postgres_binaries)
    server = PostgresServer(settings={"no_such_setting": "1"})
    try:
        with pytest.raises(ServerStartError, match="exited with code") as info:
            server.start()
        assert 'unrecognized configuration parameter "no_such_setting"' in info.value.log_tail
        assert not server.running
    finally:
        server.cleanup()


@pytest.mark.redis
def test_start_timeout_kills_server_and_reports(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need(request, "redis", find_redis_binaries)
    monkeypatch.setattr(RedisServer, "_ping", lambda self: False)
    server = RedisServer(startup_timeout=0.5)
    try:
        with pytest.raises(ServerStartError, match="did not accept connections") as info:
            server.start()
        assert "Ready to accept connections" in info.value.log_tail
        assert not server.running and not _accepts(server.port)
    finally:
        server.cleanup()


@pytest.mark.redis
def test_taken_port_is_retried_unless_fixed(request: pytest.FixtureRequest) -> None:
    _need(request, "redis", find_redis_binaries)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        fixed = RedisServer(port=taken)
        with pytest.raises(ServerStartError, match="already in use"):
            fixed.start()
        fixed.cleanup()
        chosen = RedisServer()
        chosen._port = taken  # as if another process grabbed the free port meanwhile
        with chosen:
            assert chosen.port != taken
            assert redis_cli(chosen, "ping") == "PONG"


# --------------------------------------------------------------------------- no orphans

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from ratchet.testing.servers import RedisServer
    server = RedisServer().start()
    print(server.pid, server.directory, flush=True)
    if sys.argv[1] == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.redis
@pytest.mark.parametrize("how", ["exit", "crash"])
def test_server_does_not_outlive_its_test_process(how: str) -> None:
    try:
        find_redis_binaries()
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, how], capture_output=True, text=True, timeout=120
    )
    assert child.stdout, child.stderr
    pid_text, directory = child.stdout.split()
    pid = int(pid_text)
    try:
        assert _wait_dead(pid), f"redis-server {pid} survived its parent ({how})"
        if how == "exit":
            assert child.returncode == 0, child.stderr
            assert not Path(directory).exists(), "atexit cleanup left the directory"
        else:
            assert child.returncode == -signal.SIGKILL
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)


# --------------------------------------------------------------------------- plugin

_PLUGIN_TESTS = textwrap.dedent(
    """
    import pytest

    @pytest.mark.slow
    def test_slow():
        pass

    def test_needs_postgres(postgres_server):
        assert type(postgres_server).__name__ == "ExternalServer"
    """
)


def _run_pytest(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_plugin_demo.py").write_text(_PLUGIN_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    # A URL whose port refuses connections: the fixture must skip or fail, never start.
    base["RATCHET_TEST_POSTGRES_URL"] = f"postgresql://u:p@127.0.0.1:{free_port()}/db"
    base.update(env or {})
    cmd = [sys.executable, "-m", "pytest", "-p", "ratchet.testing.pytest_plugin"]
    cmd += ["-p", "no:cacheprovider", "-rs", "-c", str(tmp_path / "pytest.ini"), *args]
    cmd.append(str(tmp_path))
    return subprocess.run(
        cmd, capture_output=True, text=True, env=base, cwd=tmp_path, timeout=120, check=False
    )


def test_plugin_skips_slow_and_unavailable_backends(tmp_path: Path) -> None:
    result = _run_pytest(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 skipped" in result.stdout
    assert "--run-slow" in result.stdout
    assert "refuses connections" in result.stdout


def test_plugin_fails_required_backend(tmp_path: Path) -> None:
    result = _run_pytest(tmp_path, "--run-slow", env={"RATCHET_REQUIRE_BACKENDS": "redis,postgres"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout and "1 error" in result.stdout
    assert "required backend 'postgres' is unavailable" in result.stdout


_BROWSER_TEST = """
def test_page(chromium_browser):
    page = chromium_browser.new_page()
    page.set_content("<h1>ok</h1>")
    assert page.inner_text("h1") == "ok"
"""


def _run_browser_test(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_browser_demo.py").write_text(_BROWSER_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    base.update(env)
    cmd = [sys.executable, "-m", "pytest", "-p", "ratchet.testing.pytest_plugin"]
    cmd += ["-p", "no:cacheprovider", "-rs", "-c", str(tmp_path / "pytest.ini"), str(tmp_path)]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=base, cwd=tmp_path, timeout=120, check=False
    )


def test_a_missing_browser_skips_or_fails_when_required(tmp_path: Path) -> None:
    missing = {"RATCHET_TEST_CHROMIUM": str(tmp_path / "no-chromium")}
    skipped = _run_browser_test(tmp_path, missing)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "1 skipped" in skipped.stdout and "no browser at" in skipped.stdout
    required = _run_browser_test(tmp_path, {**missing, "RATCHET_REQUIRE_BACKENDS": "chromium"})
    assert required.returncode == 1, required.stdout + required.stderr
    assert "required backend 'chromium' is unavailable" in required.stdout


def test_the_browser_fixture_drives_debians_chromium(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not os.access(pytest_plugin.CHROMIUM, os.X_OK):
        pytest_plugin.backend_unavailable(request.config, "chromium", "no /usr/bin/chromium")
    result = _run_browser_test(tmp_path, {"RATCHET_REQUIRE_BACKENDS": "chromium"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


class _FakeConfig:
    """Just enough of pytest.Config for pytest_configure."""

    def __init__(self, option: str | None) -> None:
        self.stash = pytest.Stash()
        self._option = option

    def addinivalue_line(self, name: str, line: str) -> None:
        pass

    def getoption(self, name: str) -> str | None:
        return self._option


@pytest.mark.parametrize(
    ("option", "env", "expected"),
    [
        (None, None, set()),
        (None, "postgres, Redis", {"postgres", "redis"}),
        ("mysql", "postgres", {"mysql"}),  # the option wins over the environment
        ("", "postgres", set()),
        (
            "all",
            None,
            {"sqlite", "postgres", "mysql", "redis", "prometheus", "chromium", "pgbouncer"},
        ),
    ],
)
def test_plugin_required_backends_from_option_or_env(
    monkeypatch: pytest.MonkeyPatch, option: str | None, env: str | None, expected: set[str]
) -> None:
    if env is None:
        monkeypatch.delenv("RATCHET_REQUIRE_BACKENDS", raising=False)
    else:
        monkeypatch.setenv("RATCHET_REQUIRE_BACKENDS", env)
    config = _FakeConfig(option)
    pytest_plugin.pytest_configure(config)  # type: ignore[arg-type]
    assert pytest_plugin.required_backends(config) == expected  # type: ignore[arg-type]


def test_plugin_rejects_unknown_backend() -> None:
    with pytest.raises(pytest.UsageError, match="oracle"):
        pytest_plugin.parse_backends("postgres,oracle")


@pytest.mark.redis
def test_plugin_uses_external_server_from_env(
    tmp_path: Path, redis_server: RedisServer | ExternalServer
) -> None:
    (tmp_path / "test_ext.py").write_text(
        textwrap.dedent(
            f"""
            def test_external(redis_server):
                assert type(redis_server).__name__ == "ExternalServer"
                assert redis_server.url() == "{redis_server.url()}"
                assert not hasattr(redis_server, "stop")
            """
        )
    )
    result = _run_pytest(
        tmp_path,
        "-k",
        "external",
        "--require-backends=redis",
        env={"RATCHET_TEST_REDIS_URL": redis_server.url(), "RATCHET_RUN_SLOW": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert redis_cli(redis_server, "ping") == "PONG"  # the external server was left running
