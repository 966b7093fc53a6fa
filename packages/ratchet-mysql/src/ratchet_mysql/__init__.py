"""MySQL 8 / MariaDB for Ratchet: the store dialect of the shared SQL store.

Installing this distribution is all it takes: ``Ratchet("mysql+pymysql://...")`` picks the store
by URL scheme (registered through the ``ratchet`` entry-point group).
"""

from __future__ import annotations

__version__ = "0.2.0"

from ratchet_mysql.dialect import MySQLDialect
from ratchet_mysql.store import MySQLStore, normalize_url

__all__ = ["MySQLDialect", "MySQLStore", "normalize_url"]
