"""MySQL 8 / MariaDB for Ratchet: the store dialect of the shared SQL store.

Installing this distribution is all it takes: ``Ratchet("mysql+pymysql://...")`` picks the store
by URL scheme (registered through the ``ratchet`` entry-point group).
"""

from __future__ import annotations

try:  # the wheel's own copy of ratchet-core's install check (see pyproject.toml)
    from ratchet_mysql._distribution import check_adapter
except ModuleNotFoundError:  # a source checkout, where `ratchet` is the workspace's own
    from ratchet._distribution import check_adapter

__version__ = "0.2.0"

# Before anything is imported from ``ratchet``: that may be another project's package.
check_adapter("ratchet-mysql", __version__)

from ratchet_mysql.dialect import MySQLDialect  # noqa: E402
from ratchet_mysql.store import MySQLStore, normalize_url  # noqa: E402

__all__ = ["MySQLDialect", "MySQLStore", "normalize_url"]
