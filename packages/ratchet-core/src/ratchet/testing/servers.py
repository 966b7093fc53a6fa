"""Throwaway PostgreSQL, PgBouncer, MariaDB, Redis and Prometheus servers for tests (standard library only).

Each server class starts a private instance from the locally installed (Debian-package)
binaries: data in a fresh temporary directory, listening on 127.0.0.1 only, on a free port,
tuned for speed rather than durability. When run as root, PostgreSQL and MariaDB run as the
``postgres`` / ``mysql`` OS users (both refuse to, or should not, run as root).

Lifecycle: ``start()`` / ``stop()`` / ``restart()`` / ``kill()`` / ``cleanup()``, or use the
object as a context manager (``with PostgresServer() as pg: ...``). ``stop()`` keeps the data
directory so that ``start()`` (or ``restart()``) comes back on the same port with the same data;
``cleanup()`` stops and deletes the temporary directory. Every started server is also cleaned up
at interpreter exit, and on Linux it gets a parent-death signal so that it does not outlive a
test process that is killed outright.

Nothing here imports a database driver: readiness and setup go through the servers' own
command-line clients (``pg_isready``/``psql``, ``mariadb-admin``, ``redis-cli``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, Self
from urllib.parse import quote, unquote, urlsplit, urlunsplit

__all__ = [
    "ExternalServer",
    "MariaDBBinaries",
    "MariaDBServer",
    "PgBouncerServer",
    "PostgresBinaries",
    "PostgresServer",
    "PrometheusServer",
    "RedisBinaries",
    "RedisServer",
    "ServerError",
    "ServerStartError",
    "ServerUnavailable",
    "find_mariadb_binaries",
    "find_pgbouncer_binary",
    "find_postgres_binaries",
    "find_prometheus_binary",
    "find_redis_binaries",
    "free_port",
]

LOCALHOST = "127.0.0.1"
DEFAULT_DATABASE = "ratchet_test"
DEFAULT_STARTUP_TIMEOUT = 60.0
_LOG_TAIL_LINES = 40
_INSTALL_HINT = "or run scripts/install-test-services.sh (as root)"

# Where binaries are looked for besides $PATH (sbin is often missing from a non-root PATH).
# Module-level so that tests can monkeypatch the lookup.
_EXTRA_BIN_DIRS: tuple[str, ...] = ("/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/libexec")
_PG_BINDIR_GLOBS: tuple[str, ...] = ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin")


class ServerError(RuntimeError):
    """Base class of the errors raised by this module."""


class ServerUnavailable(ServerError):
    """The server cannot be run here: its binaries (or its OS user) are missing."""


class ServerStartError(ServerError):
    """The server was found but did not start or did not become ready in time."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        if log_tail:
            message = f"{message}\n--- last lines of the server log ---\n{log_tail}"
        super().__init__(message)


def free_port(host: str = LOCALHOST) -> int:
    """Return a TCP port on ``host`` that was free a moment ago (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(port: int, host: str = LOCALHOST) -> bool:
    """Whether a server could listen on ``port`` now (with SO_REUSEADDR, as servers do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _tcp_accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------- binaries


def _which(name: str) -> str | None:
    """Find an executable on $PATH or in the usual sbin/libexec directories."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *_EXTRA_BIN_DIRS])
    return shutil.which(name, path=path)


def _first_which(*names: str) -> str | None:
    """The first of ``names`` that :func:`_which` finds."""
    for name in names:
        found = _which(name)
        if found:
            return found
    return None


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _version_key(path: str) -> tuple[int, ...]:
    """Sort key: the numbers in a path, so /usr/lib/postgresql/16/bin sorts after .../15/bin."""
    return tuple(int(n) for n in re.findall(r"\d+", path))


@dataclass(frozen=True)
class PostgresBinaries:
    """Paths of the PostgreSQL programs a :class:`PostgresServer` runs."""

    bindir: Path
    postgres: Path
    initdb: Path
    pg_isready: Path
    psql: Path


@dataclass(frozen=True)
class MariaDBBinaries:
    """Paths of the MariaDB programs a :class:`MariaDBServer` runs."""

    mariadbd: Path
    install_db: Path
    admin: Path
    client: Path


@dataclass(frozen=True)
class RedisBinaries:
    """Paths of the Redis programs a :class:`RedisServer` runs."""

    server: Path
    cli: Path


def _pg_bindir_candidates() -> list[str]:
    """Directories that may hold postgres+initdb, most trusted first."""
    candidates: list[str] = []
    override = os.environ.get("RATCHET_PG_BINDIR")
    if override:
        candidates.append(override)
    pg_config = _which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(out)
    found: list[str] = []
    for pattern in _PG_BINDIR_GLOBS:
        found.extend(glob.glob(pattern))
    candidates.extend(sorted(found, key=_version_key, reverse=True))
    postgres = _which("postgres")
    if postgres:
        candidates.append(str(Path(postgres).parent))
    return candidates


def find_postgres_binaries() -> PostgresBinaries:
    """Locate postgres, initdb, pg_isready and psql, or raise :class:`ServerUnavailable`.

    Looks in ``$RATCHET_PG_BINDIR``, then ``pg_config --bindir``, then
    ``/usr/lib/postgresql/*/bin`` (newest first), then ``$PATH``.
    """
    looked: list[str] = []
    for candidate in _pg_bindir_candidates():
        bindir = Path(candidate)
        looked.append(str(bindir))
        postgres, initdb = bindir / "postgres", bindir / "initdb"
        if not (_is_executable(postgres) and _is_executable(initdb)):
            continue
        pg_isready = bindir / "pg_isready"
        psql = bindir / "psql"
        if not _is_executable(pg_isready):
            pg_isready = Path(_which("pg_isready") or pg_isready)
        if not _is_executable(psql):
            psql = Path(_which("psql") or psql)
        if _is_executable(pg_isready) and _is_executable(psql):
            return PostgresBinaries(bindir, postgres, initdb, pg_isready, psql)
    where = ", ".join(looked) if looked else "no candidate directory found"
    raise ServerUnavailable(
        "PostgreSQL server binaries (postgres, initdb, pg_isready, psql) not found "
        f"(looked in: {where}). Install the Debian package 'postgresql' (PostgreSQL 15: "
        f"'postgresql-15'), {_INSTALL_HINT}; or set RATCHET_PG_BINDIR to their directory."
    )


def find_mariadb_binaries() -> MariaDBBinaries:
    """Locate mariadbd, mariadb-install-db, mariadb-admin and mariadb, or raise."""
    found = {
        "mariadbd": _first_which("mariadbd"),
        "mariadb-install-db": _first_which("mariadb-install-db", "mysql_install_db"),
        "mariadb-admin": _first_which("mariadb-admin", "mysqladmin"),
        "mariadb": _first_which("mariadb", "mysql"),
    }
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise ServerUnavailable(
            f"MariaDB binaries not found: {', '.join(missing)}. Install the Debian package "
            f"'mariadb-server' (it brings 'mariadb-client'), {_INSTALL_HINT}."
        )
    return MariaDBBinaries(
        mariadbd=Path(found["mariadbd"] or ""),
        install_db=Path(found["mariadb-install-db"] or ""),
        admin=Path(found["mariadb-admin"] or ""),
        client=Path(found["mariadb"] or ""),
    )


def find_redis_binaries() -> RedisBinaries:
    """Locate redis-server and redis-cli, or raise :class:`ServerUnavailable`."""
    server, cli = _which("redis-server"), _which("redis-cli")
    missing = [name for name, path in (("redis-server", server), ("redis-cli", cli)) if not path]
    if missing or server is None or cli is None:
        raise ServerUnavailable(
            f"Redis binaries not found: {', '.join(missing)}. Install the Debian package "
            f"'redis-server' (it brings 'redis-tools'), {_INSTALL_HINT}."
        )
    return RedisBinaries(server=Path(server), cli=Path(cli))


def find_prometheus_binary() -> Path:
    """Locate the ``prometheus`` server, or raise :class:`ServerUnavailable`."""
    found = _which("prometheus")
    if found is None:
        raise ServerUnavailable(
            f"the prometheus binary was not found. Install the Debian package 'prometheus', "
            f"{_INSTALL_HINT}."
        )
    return Path(found)


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class _Account:
    """An OS account a server process runs as (only used when we are root)."""

    name: str
    uid: int
    gid: int

    def popen_kwargs(self) -> dict[str, object]:
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def _service_account(name: str | None, package: str) -> _Account | None:
    """The account to drop to when running as root; None when not root or not needed."""
    if name is None or os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ServerUnavailable(
            f"running as root, but the OS user {name!r} that the server must run as does not "
            f"exist. Install the Debian package {package!r} (it creates the user), "
            f"{_INSTALL_HINT}."
        ) from None
    return _Account(name, entry.pw_uid, entry.pw_gid)


_PR_SET_PDEATHSIG = 1
_libc: ctypes.CDLL | None = None


def _death_signal_setter(sig: signal.Signals) -> Callable[[], None] | None:
    """A preexec_fn that makes the child receive ``sig`` when this thread dies (Linux only).

    Only used from the main thread: the kernel ties the signal to the thread that forked.
    """
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return None
    libc = _libc

    def set_death_signal() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return set_death_signal


def _clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for server and client processes: ours minus PG*/MYSQL*/REDIS* vars."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PG", "MYSQL", "MARIADB", "REDISCLI"))
    }
    if extra:
        env.update(extra)
    return env


def _run(
    cmd: Iterable[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    account: _Account | None = None,
    cwd: Path | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, capturing output (never raises on a non-zero exit)."""
    kwargs: dict[str, object] = account.popen_kwargs() if account else {}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [os.fspath(part) for part in cmd],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_clean_env(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
        **kwargs,
    )


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _traversable_by_others(path: Path) -> bool:
    """Whether every directory from / down to ``path`` lets other users pass through."""
    try:
        resolved = path.resolve()
        return all(os.stat(p).st_mode & 0o001 for p in (resolved, *resolved.parents))
    except OSError:
        return False


# Servers started and not yet cleaned up; the atexit hook cleans them all.
_live: set[_ManagedServer] = set()
_live_lock = threading.Lock()


def _cleanup_all() -> None:
    """atexit hook: stop every server still running and remove its temporary directory."""
    with _live_lock:
        servers = list(_live)
    for server in servers:
        with contextlib.suppress(Exception):
            server.cleanup()


atexit.register(_cleanup_all)


# --------------------------------------------------------------------------- base class


class _ManagedServer:
    """Common lifecycle of a throwaway server process; subclasses fill in the hooks."""

    kind: ClassVar[str]
    scheme: ClassVar[str]
    default_driver: ClassVar[str | None] = None
    external: ClassVar[bool] = False
    # OS user to drop to when running as root, and the Debian package that creates it.
    run_as: ClassVar[str | None] = None
    package: ClassVar[str]
    # Signals: a graceful stop, and what a parent death sends.
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM
    death_signal: ClassVar[signal.Signals] = signal.SIGKILL

    def __init__(
        self,
        *,
        port: int | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    ) -> None:
        self._fixed_port = port is not None
        self._port = port if port is not None else free_port()
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self.startup_timeout = startup_timeout
        self._dir: Path | None = None
        self._initialized = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_offset = 0
        self._account: _Account | None = None
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- connection details

    @property
    def host(self) -> str:
        """Address the server listens on (always 127.0.0.1)."""
        return LOCALHOST

    @property
    def port(self) -> int:
        """TCP port; fixed for the object's life once the first start succeeded."""
        return self._port

    @property
    def user(self) -> str | None:
        """User name to log in with (None when the server has no users)."""
        return None

    @property
    def password(self) -> str | None:
        """Password for :attr:`user` (None when the server needs none)."""
        return None

    @property
    def database(self) -> str:
        """The database created at first start (for Redis: the logical db number)."""
        return DEFAULT_DATABASE

    def url(self, driver: str | None = None) -> str:
        """SQLAlchemy-style URL; ``driver=None`` uses :attr:`default_driver`, ``""`` none."""
        chosen = self.default_driver if driver is None else driver
        scheme = f"{self.scheme}+{chosen}" if chosen else self.scheme
        auth = ""
        if self.user is not None:
            auth = quote(self.user, safe="")
            if self.password is not None:
                auth += ":" + quote(self.password, safe="")
            auth += "@"
        return f"{scheme}://{auth}{self.host}:{self.port}/{self.database}{self._url_query()}"

    def _url_query(self) -> str:
        return ""

    # ----------------------------------------------------------------- state

    @property
    def directory(self) -> Path | None:
        """The temporary directory holding data, socket and log (None before first start)."""
        return self._dir

    @property
    def log_path(self) -> Path | None:
        """The server's log file (stdout+stderr of every start, appended)."""
        return self._dir / "server.log" if self._dir else None

    @property
    def pid(self) -> int | None:
        """Process id of the running server, or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self.pid is not None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server log ('' when there is none)."""
        path = self.log_path
        if path is None or not path.exists():
            return ""
        return _tail(path.read_text(errors="replace"), lines)

    def _log_since_start(self) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return ""
        with path.open("rb") as fh:
            fh.seek(self._log_offset)
            return _tail(fh.read().decode(errors="replace"))

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<{type(self).__name__} {self.host}:{self.port} {state} dir={self._dir}>"

    # ----------------------------------------------------------------- hooks

    def find_binaries(self) -> object:
        """Locate the binaries this server needs; raise :class:`ServerUnavailable`."""
        raise NotImplementedError

    def _initialize(self, directory: Path) -> None:
        """Create the data directory (first start only)."""
        raise NotImplementedError

    def _command(self, directory: Path) -> list[str]:
        """The server's command line."""
        raise NotImplementedError

    def _ping(self) -> bool:
        """Whether the server's own client says it is ready."""
        raise NotImplementedError

    def _after_first_start(self) -> None:
        """One-time setup once the server is ready the first time (e.g. create the database)."""

    def _request_shutdown(self, proc: subprocess.Popen[bytes]) -> None:
        """Ask the server to shut down cleanly."""
        proc.send_signal(self.stop_signal)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        """Start the server and wait until it accepts connections; no-op when running.

        Raises :class:`ServerUnavailable` when binaries are missing and
        :class:`ServerStartError` (with the log tail) when it does not become ready within
        :attr:`startup_timeout` seconds.
        """
        with self._lock:
            if self.running:
                return self
            if self._proc is not None:  # it exited on its own: forget it, close its log
                self._reap()
            self.find_binaries()
            self._account = _service_account(self.run_as, self.package)
            first = not self._initialized
            if self._dir is None:
                self._dir = self._make_directory()
            with _live_lock:
                _live.add(self)
            if first:
                self._initialize(self._dir)
                self._initialized = True
            attempts = 1 if (self._fixed_port or not first) else 3
            for attempt in range(1, attempts + 1):
                try:
                    self._spawn_and_wait(self._dir)
                    break
                except _PortInUse as exc:
                    if attempt == attempts:
                        raise ServerStartError(
                            f"{self.kind}: port {self._port} is already in use", exc.log_tail
                        ) from None
                    self._port = free_port()
            if first:
                try:
                    self._after_first_start()
                except BaseException:
                    self.stop()
                    raise
            return self

    def _make_directory(self) -> Path:
        base = self._base_dir
        if base is None:
            base = Path(tempfile.gettempdir())
            # Service users must reach the directory, and unix socket paths must stay short.
            needs_access = self._account is not None and not _traversable_by_others(base)
            if needs_access or len(str(base)) > 60:
                base = Path("/tmp")
        base.mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix=f"ratchet-{self.kind}-", dir=base))
        if self._account is not None:
            os.chown(directory, self._account.uid, self._account.gid)
        return directory

    def _spawn_and_wait(self, directory: Path) -> None:
        if not _port_is_free(self._port):
            raise _PortInUse("")
        log_path = directory / "server.log"
        self._log = log_path.open("ab")
        self._log_offset = self._log.tell()
        kwargs: dict[str, object] = self._account.popen_kwargs() if self._account else {}
        preexec = _death_signal_setter(self.death_signal)
        proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
            self._command(directory),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=directory,
            env=_clean_env(),
            start_new_session=True,
            preexec_fn=preexec,
            **kwargs,
        )
        self._proc = proc
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = proc.poll()
            if code is not None:
                self._reap()
                tail = self._log_since_start()
                if "already in use" in tail:
                    raise _PortInUse(tail)
                raise ServerStartError(
                    f"{self.kind} exited with code {code} during startup (port {self._port}, "
                    f"directory {directory})",
                    tail,
                )
            if _tcp_accepts(LOCALHOST, self._port) and self._ping() and proc.poll() is None:
                return
            if time.monotonic() > deadline:
                self._kill_group(proc)
                self._reap()
                raise ServerStartError(
                    f"{self.kind} did not accept connections on {LOCALHOST}:{self._port} "
                    f"within {self.startup_timeout:.0f} s",
                    self._log_since_start(),
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the server down cleanly (data kept); idempotent.

        If it has not exited after ``timeout`` seconds, its whole process group is killed.
        """
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            try:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        self._request_shutdown(proc)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout)
            finally:
                if proc.poll() is None:
                    self._kill_group(proc)
                self._reap()

    def kill(self) -> None:
        """Kill the server's process group with SIGKILL (simulates a crash); idempotent."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            self._kill_group(proc)
            self._reap()

    def restart(self, timeout: float = 30.0) -> Self:
        """Stop (cleanly) and start again on the same port with the same data directory."""
        with self._lock:
            self.stop(timeout)
            return self.start()

    def cleanup(self) -> None:
        """Stop the server and delete its temporary directory; idempotent.

        A later ``start()`` initializes a fresh data directory.
        """
        with self._lock:
            try:
                self.stop()
            finally:
                directory, self._dir = self._dir, None
                self._initialized = False
                with _live_lock:
                    _live.discard(self)
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)

    def _kill_group(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the process group led by ``proc`` and wait for ``proc``."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def _reap(self) -> None:
        """Forget the process (after it exited) and close the log file."""
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


class _PortInUse(Exception):
    """Internal: the chosen port was taken (start retries with another one)."""

    def __init__(self, log_tail: str) -> None:
        super().__init__("port in use")
        self.log_tail = log_tail


# --------------------------------------------------------------------------- PostgreSQL


class PostgresServer(_ManagedServer):
    """A throwaway PostgreSQL cluster (fsync off) with database ``ratchet_test``.

    The superuser is :attr:`user` (default ``postgres``) with a random :attr:`password`
    (scram-sha-256 over TCP). ``url()`` gives ``postgresql+psycopg://...``.
    """

    kind = "postgres"
    scheme = "postgresql"
    default_driver = "psycopg"
    run_as = "postgres"
    package = "postgresql"
    stop_signal = signal.SIGINT  # "fast" shutdown: disconnect clients, checkpoint, exit
    death_signal = signal.SIGQUIT  # "immediate" shutdown, takes the backends with it

    def __init__(
        self,
        *,
        port: int | None = None,
        user: str = "postgres",
        password: str | None = None,
        database: str = DEFAULT_DATABASE,
        base_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(port=port, base_dir=base_dir, startup_timeout=startup_timeout)
        self._user = user
        self._password = password if password is not None else secrets.token_hex(12)
        self._database = database
        self._settings = {
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
            **(settings or {}),
        }
        self._bin: PostgresBinaries | None = None

    @property
    def user(self) -> str:
        """The superuser created by initdb."""
        return self._user

    @property
    def password(self) -> str:
        """The superuser's password."""
        return self._password

    @property
    def database(self) -> str:
        """The database created at first start."""
        return self._database

    @property
    def data_dir(self) -> Path | None:
        """The cluster's data directory (PGDATA)."""
        return self._dir / "data" if self._dir else None

    def find_binaries(self) -> PostgresBinaries:
        """Locate the PostgreSQL binaries (see :func:`find_postgres_binaries`)."""
        if self._bin is None:
            self._bin = find_postgres_binaries()
        return self._bin

    def client_env(self) -> dict[str, str]:
        """Environment for ``psql`` & co. (PGPASSWORD set)."""
        return {"PGPASSWORD": self._password, "PGCONNECT_TIMEOUT": "5"}

    def psql(self, sql: str, *, database: str | None = None, timeout: float = 60.0) -> str:
        """Run ``sql`` through ``psql`` over TCP; return unaligned, tuples-only output.

        Raises :class:`ServerError` when psql fails.
        """
        result = _run(
            [
                self.find_binaries().psql,
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                self.user,
                "-d",
                database or self.database,
                "-c",
                sql,
            ],
            env=self.client_env(),
            timeout=timeout,
        )
        if result.returncode != 0:
            raise ServerError(f"psql failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout.strip()

    def _initialize(self, directory: Path) -> None:
        binaries = self.find_binaries()
        pwfile = directory / "pwfile"
        pwfile.write_text(self._password + "\n")
        if self._account is not None:
            os.chown(pwfile, self._account.uid, self._account.gid)
        try:
            result = _run(
                [
                    binaries.initdb,
                    "-D",
                    directory / "data",
                    "-U",
                    self._user,
                    f"--pwfile={pwfile}",
                    "--auth-host=scram-sha-256",
                    "--auth-local=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ],
                account=self._account,
                cwd=directory,
                timeout=self.startup_timeout,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise ServerStartError(
                f"initdb failed with code {result.returncode}",
                _tail(result.stdout + result.stderr),
            )

    def _command(self, directory: Path) -> list[str]:
        cmd = [
            os.fspath(self.find_binaries().postgres),
            "-D",
            os.fspath(directory / "data"),
            "-p",
            str(self._port),
            "-c",
            f"listen_addresses={LOCALHOST}",
            "-c",
            f"unix_socket_directories={directory}",
        ]
        for name, value in self._settings.items():
            cmd += ["-c", f"{name}={value}"]
        return cmd

    def _ping(self) -> bool:
        result = _run(
            [
                self.find_binaries().pg_isready,
                "-q",
                "-h",
                self.host,
                "-p",
                str(self._port),
                "-U",
                self._user,
                "-d",
                "postgres",
                "-t",
                "5",
            ],
            timeout=10,
        )
        return result.returncode == 0

    def _after_first_start(self) -> None:
        name = self._database.replace('"', '""')
        self.psql(f'CREATE DATABASE "{name}"', database="postgres")


# --------------------------------------------------------------------------- MariaDB


class MariaDBServer(_ManagedServer):
    """A throwaway MariaDB server (utf8mb4, no binlog, lazy flush) with ``ratchet_test``.

    Users ``root@localhost`` and ``root@127.0.0.1`` have the random :attr:`password`.
    ``url()`` gives ``mysql+pymysql://root:...@127.0.0.1:PORT/ratchet_test?charset=utf8mb4``.
    """

    kind = "mariadb"
    scheme = "mysql"
    default_driver = "pymysql"
    run_as = "mysql"
    package = "mariadb-server"
    stop_signal = signal.SIGTERM

    def __init__(
        self,
        *,
        port: int | None = None,
        password: str | None = None,
        database: str = DEFAULT_DATABASE,
        base_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        options: Iterable[str] = (),
    ) -> None:
        super().__init__(port=port, base_dir=base_dir, startup_timeout=startup_timeout)
        self._password = password if password is not None else secrets.token_hex(12)
        self._database = database
        self._options = list(options)
        self._bin: MariaDBBinaries | None = None

    @property
    def user(self) -> str:
        """Always ``root``."""
        return "root"

    @property
    def password(self) -> str:
        """root's password."""
        return self._password

    @property
    def database(self) -> str:
        """The database created at initialization."""
        return self._database

    @property
    def data_dir(self) -> Path | None:
        """The server's datadir."""
        return self._dir / "data" if self._dir else None

    @property
    def socket_path(self) -> Path | None:
        """The unix socket (root@localhost can use it with the password too)."""
        return self._dir / "mysqld.sock" if self._dir else None

    def _url_query(self) -> str:
        return "?charset=utf8mb4"

    def find_binaries(self) -> MariaDBBinaries:
        """Locate the MariaDB binaries (see :func:`find_mariadb_binaries`)."""
        if self._bin is None:
            self._bin = find_mariadb_binaries()
        return self._bin

    def client_env(self) -> dict[str, str]:
        """Environment for ``mariadb`` & co. (MYSQL_PWD set)."""
        return {"MYSQL_PWD": self._password}

    def client_args(self) -> list[str]:
        """Connection arguments for the ``mariadb`` client (TCP, root; pass client_env())."""
        return [
            "--no-defaults",
            "--protocol=TCP",
            f"--host={self.host}",
            f"--port={self.port}",
            f"--user={self.user}",
            "--connect-timeout=5",
        ]

    def sql(self, sql: str, *, database: str | None = None, timeout: float = 60.0) -> str:
        """Run ``sql`` through the ``mariadb`` client; return tab-separated rows, no header.

        Raises :class:`ServerError` when the client fails.
        """
        result = _run(
            [
                self.find_binaries().client,
                *self.client_args(),
                "--batch",
                "--skip-column-names",
                f"--database={database or self.database}",
                f"--execute={sql}",
            ],
            env=self.client_env(),
            timeout=timeout,
        )
        if result.returncode != 0:
            raise ServerError(f"mariadb failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout.strip()

    def _initialize(self, directory: Path) -> None:
        binaries = self.find_binaries()
        db = self._database.replace("`", "``")
        pw = self._password.replace("\\", "\\\\").replace("'", "\\'")
        local = "('localhost', '127.0.0.1', '::1')"
        extra = directory / "init.sql"
        # Runs in bootstrap mode (grant tables off), so set passwords in the table directly.
        extra.write_text(
            f"CREATE DATABASE IF NOT EXISTS `{db}` "
            "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;\n"
            f"DELETE FROM mysql.global_priv WHERE User = 'root' AND Host NOT IN {local};\n"
            f"DELETE FROM mysql.proxies_priv WHERE Host NOT IN {local};\n"
            "UPDATE mysql.global_priv SET priv = JSON_SET(priv, '$.plugin', "
            f"'mysql_native_password', '$.authentication_string', PASSWORD('{pw}')) "
            "WHERE User = 'root';\n"
        )
        if self._account is not None:
            os.chown(extra, self._account.uid, self._account.gid)
        try:
            result = _run(
                [
                    binaries.install_db,
                    "--no-defaults",
                    f"--datadir={directory / 'data'}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--skip-name-resolve",
                    f"--extra-file={extra}",
                ],
                account=self._account,
                cwd=directory,
                timeout=self.startup_timeout,
            )
        finally:
            extra.unlink(missing_ok=True)
        if result.returncode != 0:
            raise ServerStartError(
                f"mariadb-install-db failed with code {result.returncode}",
                _tail(result.stdout + result.stderr),
            )

    def _command(self, directory: Path) -> list[str]:
        return [
            os.fspath(self.find_binaries().mariadbd),
            "--no-defaults",
            f"--datadir={directory / 'data'}",
            f"--port={self._port}",
            f"--bind-address={LOCALHOST}",
            f"--socket={directory / 'mysqld.sock'}",
            f"--pid-file={directory / 'mysqld.pid'}",
            "--skip-log-bin",
            "--skip-name-resolve",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
            "--innodb-buffer-pool-size=256M",
            "--innodb-buffer-pool-dump-at-shutdown=0",
            "--innodb-buffer-pool-load-at-startup=0",
            "--max-connections=300",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci",
            *self._options,
        ]

    def _ping(self) -> bool:
        result = _run(
            [self.find_binaries().admin, *self.client_args(), "ping"],
            env=self.client_env(),
            timeout=10,
        )
        return result.returncode == 0


# --------------------------------------------------------------------------- PgBouncer


def find_pgbouncer_binary() -> Path:
    """Locate the ``pgbouncer`` binary, or raise :class:`ServerUnavailable`."""
    found = _which("pgbouncer")
    if found is None:
        raise ServerUnavailable(
            f"the pgbouncer binary was not found. Install the Debian package 'pgbouncer', "
            f"{_INSTALL_HINT}."
        )
    return Path(found)


def _ini_value(value: str) -> str:
    """A value for pgbouncer.ini / its auth file: refuses what would need quoting."""
    if not value or any(c in value for c in '"\n\r;#= '):
        raise ValueError(f"unsupported character in PgBouncer setting {value!r}")
    return value


class PgBouncerServer(_ManagedServer):
    """A throwaway PgBouncer on a free loopback port in front of a PostgreSQL server.

    Every database name is passed through to ``upstream_host:upstream_port`` (a ``*`` entry), in
    ``pool_mode`` (default ``transaction``: a server connection per transaction, no session
    state kept for a client). Clients log in as the upstream's ``user`` with its ``password``
    (SCRAM); PgBouncer logs in upstream with the same. ``url()`` gives
    ``postgresql+psycopg://user:pw@127.0.0.1:PORT/ratchet_test``; :meth:`url_for` any database.
    """

    kind = "pgbouncer"
    scheme = "postgresql"
    default_driver = "psycopg"
    run_as = "postgres"  # PgBouncer refuses to run as root
    package = "pgbouncer"

    def __init__(
        self,
        *,
        upstream_host: str,
        upstream_port: int,
        user: str,
        password: str,
        database: str = DEFAULT_DATABASE,
        pool_mode: str = "transaction",
        settings: Mapping[str, str] | None = None,
        port: int | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    ) -> None:
        super().__init__(port=port, base_dir=base_dir, startup_timeout=startup_timeout)
        self._user = _ini_value(user)
        self._password = password
        self._database = database
        self._settings = {
            "pool_mode": pool_mode,
            "max_client_conn": "400",
            "default_pool_size": "20",
            "server_idle_timeout": "30",
            "ignore_startup_parameters": "extra_float_digits",
            **(settings or {}),
        }
        self._upstream = (_ini_value(upstream_host), int(upstream_port))

    @property
    def user(self) -> str:
        return self._user

    @property
    def password(self) -> str:
        return self._password

    @property
    def database(self) -> str:
        return self._database

    def url_for(self, database: str, driver: str | None = None) -> str:
        """The URL of ``database`` through this PgBouncer."""
        base = self.url(driver)
        head, _, _ = base.rpartition("/")
        return f"{head}/{quote(database, safe='')}"

    def find_binaries(self) -> Path:
        return find_pgbouncer_binary()

    def _initialize(self, directory: Path) -> None:
        host, port = self._upstream
        secret = self._password.replace('"', '""')
        auth = directory / "userlist.txt"
        auth.write_text(f'"{self._user}" "{secret}"\n')
        settings = {
            "listen_addr": LOCALHOST,
            "listen_port": str(self._port),
            "unix_socket_dir": "",
            "auth_type": "scram-sha-256",
            "auth_file": os.fspath(auth),
            "admin_users": self._user,
            "stats_users": self._user,
            **self._settings,
        }
        lines = ["[databases]", f"* = host={host} port={port}", "", "[pgbouncer]"]
        lines += [f"{name} = {value}" for name, value in settings.items()]
        ini = directory / "pgbouncer.ini"
        ini.write_text("\n".join(lines) + "\n")
        for path in (auth, ini):
            path.chmod(0o600)
            if self._account is not None:
                os.chown(path, self._account.uid, self._account.gid)

    def _command(self, directory: Path) -> list[str]:
        return [os.fspath(self.find_binaries()), os.fspath(directory / "pgbouncer.ini")]

    def _ping(self) -> bool:
        return True  # accepting TCP connections is PgBouncer's readiness

    def _spawn_and_wait(self, directory: Path) -> None:
        ini = directory / "pgbouncer.ini"
        text = ini.read_text()
        text = re.sub(r"(?m)^listen_port = .*$", f"listen_port = {self._port}", text)
        ini.write_text(text)
        super()._spawn_and_wait(directory)


# --------------------------------------------------------------------------- Redis


class RedisServer(_ManagedServer):
    """A throwaway Redis server (no snapshots, no AOF) without a password.

    ``stop()`` uses ``SHUTDOWN SAVE`` so that data survives ``restart()``; ``kill()`` loses it.
    ``url()`` gives ``redis://127.0.0.1:PORT/0``.
    """

    kind = "redis"
    scheme = "redis"
    default_driver = None
    run_as = None
    package = "redis-server"
    stop_signal = signal.SIGTERM

    def __init__(
        self,
        *,
        port: int | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        options: Iterable[str] = (),
    ) -> None:
        super().__init__(port=port, base_dir=base_dir, startup_timeout=startup_timeout)
        self._options = list(options)
        self._bin: RedisBinaries | None = None

    @property
    def database(self) -> str:
        """The logical database number used in :meth:`url` ("0")."""
        return "0"

    def url(self, driver: str | None = None) -> str:
        """``redis://127.0.0.1:PORT/0``; Redis has no driver variants (``driver`` must be empty)."""
        if driver:
            raise ValueError(f"redis URLs take no driver, got {driver!r}")
        return f"redis://{self.host}:{self.port}/{self.database}"

    def find_binaries(self) -> RedisBinaries:
        """Locate the Redis binaries (see :func:`find_redis_binaries`)."""
        if self._bin is None:
            self._bin = find_redis_binaries()
        return self._bin

    def cli(self, *args: str, timeout: float = 30.0) -> str:
        """Run ``redis-cli`` with ``args`` against this server; return its stdout, stripped.

        Raises :class:`ServerError` when redis-cli fails or prints an error reply.
        """
        result = _run(
            [self.find_binaries().cli, "-h", self.host, "-p", str(self.port), *args],
            timeout=timeout,
        )
        out = result.stdout.strip()
        if result.returncode != 0 or out.startswith(("ERR", "(error)")):
            raise ServerError(f"redis-cli failed ({result.returncode}): {out} {result.stderr}")
        return out

    def _initialize(self, directory: Path) -> None:
        (directory / "data").mkdir(exist_ok=True)

    def _command(self, directory: Path) -> list[str]:
        return [
            os.fspath(self.find_binaries().server),
            "--port",
            str(self._port),
            "--bind",
            LOCALHOST,
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            os.fspath(directory / "data"),
            "--dbfilename",
            "dump.rdb",
            *self._options,
        ]

    def _ping(self) -> bool:
        result = _run(
            [self.find_binaries().cli, "-h", self.host, "-p", str(self._port), "ping"],
            timeout=10,
        )
        return result.returncode == 0 and result.stdout.strip() == "PONG"

    def _request_shutdown(self, proc: subprocess.Popen[bytes]) -> None:
        # SHUTDOWN SAVE writes dump.rdb even though no save points are configured.
        cli = self.find_binaries().cli
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _run([cli, "-h", self.host, "-p", str(self._port), "shutdown", "save"], timeout=30)
        if proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        if proc.poll() is None:
            proc.send_signal(self.stop_signal)


class PrometheusServer(_ManagedServer):
    """A throwaway Prometheus scraping ``targets`` (``host:port`` of ``/metrics`` endpoints)
    every ``scrape_interval`` seconds, its TSDB in the temporary directory.

    :meth:`query` runs an instant PromQL query through the HTTP API (``/api/v1/query``).
    """

    kind = "prometheus"
    scheme = "http"
    package = "prometheus"

    def __init__(
        self,
        targets: Iterable[str],
        *,
        scrape_interval: float = 0.5,
        job: str = "ratchet",
        port: int | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    ) -> None:
        super().__init__(port=port, base_dir=base_dir, startup_timeout=startup_timeout)
        self.targets = tuple(targets)
        self.scrape_interval = scrape_interval
        self.job = job

    @property
    def database(self) -> str:
        return ""

    def url(self, driver: str | None = None) -> str:
        return f"http://{self.host}:{self.port}"

    def find_binaries(self) -> Path:
        return find_prometheus_binary()

    def _initialize(self, directory: Path) -> None:
        interval = f"{max(1, round(self.scrape_interval * 1000))}ms"
        targets = ", ".join(f'"{t}"' for t in self.targets)
        (directory / "prometheus.yml").write_text(
            "global:\n"
            f"  scrape_interval: {interval}\n"
            f"  evaluation_interval: {interval}\n"
            "scrape_configs:\n"
            f"  - job_name: {self.job}\n"
            f"    scrape_interval: {interval}\n"
            f"    scrape_timeout: {interval}\n"
            f"    static_configs:\n"
            f"      - targets: [{targets}]\n"
        )
        (directory / "data").mkdir(exist_ok=True)

    def _command(self, directory: Path) -> list[str]:
        return [
            str(self.find_binaries()),
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={LOCALHOST}:{self._port}",
            "--log.level=warn",
        ]

    def _ping(self) -> bool:
        return self._get("/-/ready") is not None

    def _get(self, path: str, timeout: float = 5.0) -> bytes | None:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.url()}{path}", timeout=timeout) as response:
                return bytes(response.read()) if response.status == 200 else None
        except (OSError, urllib.error.URLError):
            return None

    def query(self, expr: str) -> list[dict[str, object]]:
        """The result vector of the instant query ``expr`` (``[]`` when it matches nothing).

        :raises ServerError: Prometheus did not answer, or answered with an error.
        """
        import json
        from urllib.parse import urlencode

        body = self._get(f"/api/v1/query?{urlencode({'query': expr})}")
        if body is None:
            raise ServerError(f"prometheus at {self.url()} did not answer the query {expr!r}")
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise ServerError(f"prometheus refused the query {expr!r}: {answer}")
        return list(answer["data"]["result"])


# --------------------------------------------------------------------------- external


class ExternalServer:
    """An already-running server given by URL: same connection interface, no lifecycle.

    ``url(driver)`` swaps the ``+driver`` part of the scheme (``None`` keeps the given one,
    or uses ``default_driver``; ``""`` drops it).
    """

    external: ClassVar[bool] = True

    def __init__(self, kind: str, url: str, default_driver: str | None = None) -> None:
        parts = urlsplit(url)
        if not parts.scheme or parts.hostname is None:
            raise ValueError(f"not a server URL: {url!r}")
        self.kind = kind
        self._parts = parts
        base, _, given = parts.scheme.partition("+")
        self._scheme = base
        self._driver = given or default_driver

    @property
    def host(self) -> str:
        """Host name or address from the URL."""
        return self._parts.hostname or LOCALHOST

    @property
    def port(self) -> int:
        """Port from the URL, or the scheme's well-known port."""
        if self._parts.port is not None:
            return self._parts.port
        return {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306}.get(
            self._scheme, 6379
        )

    @property
    def user(self) -> str | None:
        """User name from the URL, if any."""
        return unquote(self._parts.username) if self._parts.username else None

    @property
    def password(self) -> str | None:
        """Password from the URL, if any."""
        return unquote(self._parts.password) if self._parts.password is not None else None

    @property
    def database(self) -> str:
        """Database name (or Redis db number) from the URL path ('' when absent)."""
        return unquote(self._parts.path.lstrip("/"))

    @property
    def running(self) -> bool:
        """Whether the server accepts TCP connections right now."""
        return _tcp_accepts(self.host, self.port, timeout=5.0)

    def url(self, driver: str | None = None) -> str:
        """The URL, with the driver part of the scheme replaced as described above."""
        chosen = self._driver if driver is None else driver
        scheme = f"{self._scheme}+{chosen}" if chosen else self._scheme
        return urlunsplit(self._parts._replace(scheme=scheme))

    def __repr__(self) -> str:
        return f"<ExternalServer {self.kind} {self.host}:{self.port}>"
