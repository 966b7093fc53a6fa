"""Migrations on MariaDB 10.11: several nodes starting at once migrate exactly once (GET_LOCK)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet.sql.migrate import VERSION_TABLE, current_revisions, head_revisions
from ratchet_mysql import MySQLStore
from ratchet_mysql import dialect as mysql_dialect

NODES = 4

NODE_SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
from ratchet_mysql import MySQLStore
store = MySQLStore(sys.argv[1])
print("READY", flush=True)
sys.stdin.readline()
store.migrate()
store.close()
print("MIGRATED", flush=True)
"""


@pytest.fixture
def empty_database(mysql_template: Any) -> Iterator[str]:
    name = mysql_template.create_empty()
    try:
        yield name
    finally:
        mysql_template.drop(name)


def test_mariadb_1011_nodes_starting_together_migrate_exactly_once(
    mysql_template: Any, empty_database: str
) -> None:
    url = mysql_template.url(empty_database)
    nodes = [
        subprocess.Popen(
            [sys.executable, "-c", NODE_SCRIPT, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(NODES)
    ]
    try:
        for node in nodes:  # every node imported and built its store: now start them together
            assert node.stdout is not None
            assert node.stdout.readline().strip() == b"READY"
        for node in nodes:
            assert node.stdin is not None
            node.stdin.write(b"go\n")
            node.stdin.flush()
        outputs = [node.communicate(timeout=180)[0].decode() for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    report = "\n".join(outputs)
    assert [node.returncode for node in nodes] == [0] * NODES, report
    assert all("MIGRATED" in out for out in outputs), report
    assert report.count("created the Ratchet schema") == 1, report  # one node migrated
    assert "Running upgrade" not in report, "Alembic's own lines are held back"
    store = MySQLStore(url)
    try:
        assert current_revisions(store) == head_revisions(store)
        assert "0003" in current_revisions(store)
    finally:
        store.close()
    versions = mysql_template.execute(f"SELECT version_num FROM `{VERSION_TABLE}`", empty_database)
    assert sorted(v for (v,) in versions) == sorted(head_revisions(store))
    lock = mysql_dialect.migration_lock_name(empty_database)
    assert mysql_template.execute("SELECT IS_FREE_LOCK(%s)", args=(lock,))[0][0] == 1


def test_mariadb_1011_migrate_at_head_does_nothing(mysql_database_url: str) -> None:
    store = MySQLStore(mysql_database_url)
    try:
        before = current_revisions(store)
        store.migrate()
        assert current_revisions(store) == before == head_revisions(store)
    finally:
        store.close()


def test_mariadb_1011_migration_lock_times_out_while_another_node_holds_it(
    mysql_template: Any, mysql_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mysql_dialect, "MIGRATION_LOCK_TIMEOUT", 1)
    holder = mysql_template.admin()
    store = MySQLStore(mysql_database_url)
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 5)", (mysql_dialect.migration_lock_name("ratchet_t"),))
            assert cur.fetchone() == (1,)
        with pytest.raises(TimeoutError, match="ratchet_migrate"):
            store.migrate()
    finally:
        holder.close()  # a named lock dies with its session
        store.close()
    store = MySQLStore(mysql_database_url)
    try:
        store.migrate()  # free again
    finally:
        store.close()
