"""``ratchet dashboard``: found through the ``ratchet.commands`` entry point, listening on
127.0.0.1 unless told otherwise, and refusing any other address without authentication."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from ratchet import Ratchet
from ratchet.cli import main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_without_auth() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_DASHBOARD_")}


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on ``port`` (from /proc/net/tcp*)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port and len(address) == width:
                raw = bytes.fromhex(address)
                if width == 8:
                    found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
                else:
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                    found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


def test_the_command_is_listed_by_ratchet() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "dashboard" in result.output


def test_another_address_without_auth_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ratchet.cli",
            "dashboard",
            "--url",
            f"sqlite:///{db}",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        env=env_without_auth(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "refusing to listen on 0.0.0.0 without authentication" in done.stderr
    assert "Traceback" not in done.stderr
    assert not db.exists()  # refused before anything touched the database


def test_a_database_without_the_schema_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ratchet.cli",
            "dashboard",
            "--url",
            f"sqlite:///{empty}",
            "--port",
            str(free_port()),
        ],
        env=env_without_auth(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and "ratchet db upgrade" in done.stderr
    assert "Traceback" not in done.stderr


def test_by_default_it_listens_on_loopback_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    Ratchet(url, allow_empty_class_policy=True).close()  # creates the schema
    port = free_port()
    log = tmp_path / "dashboard.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ratchet.cli",
                "dashboard",
                "--url",
                url,
                "--port",
                str(port),
                "--read-only",
            ],
            env=env_without_auth(),
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 30
        body = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                    body = response.read().decode()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"the dashboard exited: {log.read_text()}")
                time.sleep(0.1)  # polling an external process, with a deadline
        assert "Queue depth" in body and "read-only" in body
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
