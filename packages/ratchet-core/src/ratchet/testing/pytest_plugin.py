"""pytest plugin for Ratchet's own tests and for adapter authors.

Load it with ``-p ratchet.testing.pytest_plugin``. It provides:

* ``--run-slow`` (or ``RATCHET_RUN_SLOW=1``): tests marked ``slow`` are skipped without it.
* ``--require-backends=postgres,mysql`` (or ``RATCHET_REQUIRE_BACKENDS``; the option wins;
  ``all`` means every backend): a backend fixture that cannot provide its server then FAILS
  the test instead of skipping it. Backends: sqlite, postgres, mysql, redis, prometheus,
  chromium (Debian's headless browser, for the dashboard's browser tests), pgbouncer.
* ``prometheus_factory``: starts a throwaway Prometheus scraping the given targets.
* ``chromium_browser``: Debian's Chromium (``RATCHET_TEST_CHROMIUM``, default
  ``/usr/bin/chromium``), headless, driven by Playwright, which is pointed at that executable
  and never downloads a browser. One per test module.
* ``pgbouncer_server`` (session): a throwaway PgBouncer in transaction pooling in front of
  ``postgres_server``, every database passed through.
* session fixtures ``postgres_server``, ``mariadb_server`` and ``redis_server``: a throwaway
  server from :mod:`ratchet.testing.servers`, started the first time a test asks for it and
  cleaned up at session end. ``RATCHET_TEST_POSTGRES_URL`` / ``RATCHET_TEST_MYSQL_URL`` /
  ``RATCHET_TEST_REDIS_URL`` point them at an existing server instead (an
  :class:`~ratchet.testing.servers.ExternalServer`: same ``url()``/``host``/``port`` etc.).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import pytest

from ratchet.testing.servers import (
    ExternalServer,
    MariaDBServer,
    PgBouncerServer,
    PostgresServer,
    PrometheusServer,
    RedisServer,
    ServerError,
)

BACKENDS: tuple[str, ...] = (
    "sqlite",
    "postgres",
    "mysql",
    "redis",
    "prometheus",
    "chromium",
    "pgbouncer",
)
_TRUE = {"1", "true", "yes", "on"}
#: Where Debian installs Chromium (``apt-get install chromium``).
CHROMIUM = "/usr/bin/chromium"
_required_key = pytest.StashKey[frozenset[str]]()
_S = TypeVar("_S", PostgresServer, MariaDBServer, RedisServer)

_MARKERS = (
    "postgres: needs a PostgreSQL server (started by the test run)",
    "mysql: needs a MariaDB/MySQL server (started by the test run)",
    "redis: needs a Redis server (started by the test run)",
    "prometheus: needs the prometheus binary (the test starts its own server)",
    "chromium: needs Debian's chromium and the playwright package (a headless browser)",
    "pgbouncer: needs the pgbouncer binary (started in front of the test PostgreSQL)",
    "slow: long-running test; run on demand with --run-slow or RATCHET_RUN_SLOW=1",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--run-slow`` and ``--require-backends``."""
    group = parser.getgroup("ratchet", "Ratchet test backends")
    group.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="run tests marked 'slow' (also: RATCHET_RUN_SLOW=1)",
    )
    group.addoption(
        "--require-backends",
        default=None,
        metavar="LIST",
        help=(
            "comma list of backends (sqlite,postgres,mysql,redis,prometheus,chromium,pgbouncer "
            "or 'all') whose "
            "servers must "
            "be available: their fixtures fail instead of skipping "
            "(default: $RATCHET_REQUIRE_BACKENDS)"
        ),
    )


def parse_backends(value: str | None) -> frozenset[str]:
    """Parse a comma list of backend names ('all' = every backend); raise UsageError."""
    names = {part.strip().lower() for part in (value or "").split(",") if part.strip()}
    if "all" in names:
        return frozenset(BACKENDS)
    unknown = names - set(BACKENDS)
    if unknown:
        raise pytest.UsageError(
            f"unknown backend(s) {', '.join(sorted(unknown))} in --require-backends / "
            f"RATCHET_REQUIRE_BACKENDS; choose from {', '.join(BACKENDS)}"
        )
    return frozenset(names)


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers and read the required backends."""
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    option = config.getoption("--require-backends")
    value = option if option is not None else os.environ.get("RATCHET_REQUIRE_BACKENDS")
    config.stash[_required_key] = parse_backends(value)


def run_slow(config: pytest.Config) -> bool:
    """Whether slow tests run in this session (``--run-slow`` or ``RATCHET_RUN_SLOW``)."""
    if config.getoption("--run-slow"):
        return True
    return os.environ.get("RATCHET_RUN_SLOW", "").strip().lower() in _TRUE


def required_backends(config: pytest.Config) -> frozenset[str]:
    """The backends that must be available in this session."""
    return config.stash.get(_required_key, frozenset())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``slow`` unless slow tests were asked for."""
    if run_slow(config):
        return
    skip = pytest.mark.skip(reason="slow test: run with --run-slow or RATCHET_RUN_SLOW=1")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def backend_unavailable(config: pytest.Config, backend: str, reason: str) -> NoReturn:
    """Fail (backend required) or skip (otherwise) because ``backend`` cannot be used."""
    if backend in required_backends(config):
        pytest.fail(
            f"required backend {backend!r} is unavailable: {reason}\n"
            "(required through --require-backends / RATCHET_REQUIRE_BACKENDS)",
            pytrace=False,
        )
    pytest.skip(f"{backend} unavailable: {reason}")


def _server_fixture(
    request: pytest.FixtureRequest,
    backend: str,
    env_var: str,
    default_driver: str | None,
    factory: Callable[[], _S],
) -> Iterator[_S | ExternalServer]:
    """Yield an external server from ``env_var`` or a started throwaway one."""
    config = request.config
    url = os.environ.get(env_var, "").strip()
    if url:
        try:
            external = ExternalServer(backend, url, default_driver)
        except ValueError as exc:
            backend_unavailable(config, backend, f"{env_var}: {exc}")
        if not external.running:
            backend_unavailable(
                config,
                backend,
                f"{env_var} points at {external.host}:{external.port}, which refuses connections",
            )
        yield external
        return
    server = factory()
    try:
        server.start()
    except (ServerError, OSError) as exc:
        server.cleanup()
        backend_unavailable(config, backend, f"{type(exc).__name__}: {exc}")
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def postgres_server(
    request: pytest.FixtureRequest,
) -> Iterator[PostgresServer | ExternalServer]:
    """A PostgreSQL server for the session (or ``RATCHET_TEST_POSTGRES_URL``)."""
    yield from _server_fixture(
        request, "postgres", "RATCHET_TEST_POSTGRES_URL", "psycopg", PostgresServer
    )


@pytest.fixture(scope="session")
def mariadb_server(
    request: pytest.FixtureRequest,
) -> Iterator[MariaDBServer | ExternalServer]:
    """A MariaDB server for the session (or ``RATCHET_TEST_MYSQL_URL``)."""
    yield from _server_fixture(request, "mysql", "RATCHET_TEST_MYSQL_URL", "pymysql", MariaDBServer)


@pytest.fixture(scope="session")
def redis_server(
    request: pytest.FixtureRequest,
) -> Iterator[RedisServer | ExternalServer]:
    """A Redis server for the session (or ``RATCHET_TEST_REDIS_URL``)."""
    yield from _server_fixture(request, "redis", "RATCHET_TEST_REDIS_URL", None, RedisServer)


@pytest.fixture(scope="session")
def pgbouncer_server(
    request: pytest.FixtureRequest, postgres_server: PostgresServer | ExternalServer
) -> Iterator[PgBouncerServer]:
    """PgBouncer (transaction pooling) in front of ``postgres_server``, for the session."""
    user, password = postgres_server.user, postgres_server.password
    if user is None or password is None:
        backend_unavailable(
            request.config, "pgbouncer", "the PostgreSQL server URL names no user and password"
        )
    server = PgBouncerServer(
        upstream_host=postgres_server.host,
        upstream_port=postgres_server.port,
        user=user,
        password=password,
        database=postgres_server.database,
    )
    try:
        server.start()
    except (ServerError, OSError, ValueError) as exc:
        server.cleanup()
        backend_unavailable(request.config, "pgbouncer", f"{type(exc).__name__}: {exc}")
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def prometheus_factory(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., PrometheusServer]]:
    """``start(targets, scrape_interval=0.5)``: a started throwaway Prometheus scraping
    ``targets`` (``host:port`` strings), cleaned up after the test. When the server cannot start
    the test skips, or fails if ``prometheus`` is a required backend."""
    started: list[PrometheusServer] = []

    def start(targets: list[str], scrape_interval: float = 0.5) -> PrometheusServer:
        server = PrometheusServer(targets, scrape_interval=scrape_interval)
        started.append(server)
        try:
            return server.start()
        except (ServerError, OSError) as exc:
            server.cleanup()
            backend_unavailable(request.config, "prometheus", f"{type(exc).__name__}: {exc}")

    yield start
    for server in started:
        server.cleanup()


@pytest.fixture(scope="module")
def chromium_browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``) for this module's tests: the executable
    at ``$RATCHET_TEST_CHROMIUM`` or ``/usr/bin/chromium``, never one Playwright downloads.
    When it cannot start the tests skip, or fail if ``chromium`` is a required backend."""
    path = os.environ.get("RATCHET_TEST_CHROMIUM") or CHROMIUM
    if not os.access(path, os.X_OK):
        backend_unavailable(
            request.config, "chromium", f"no browser at {path} (apt-get install chromium)"
        )
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as exc:
        backend_unavailable(request.config, "chromium", f"playwright is not installed: {exc}")
    driver = sync_playwright().start()
    try:
        browser = driver.chromium.launch(
            executable_path=path, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
    except Error as exc:
        driver.stop()
        backend_unavailable(request.config, "chromium", f"cannot launch {path}: {exc}")
    yield browser
    browser.close()
    driver.stop()
