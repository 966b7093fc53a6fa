"""The app of the chaos workers: ``ratchet worker chaos_app:app``.

The database URL comes from ``RATCHET_TEST_URL``; the node's stable name from
``RATCHET_CHAOS_NODE`` (a restarted worker keeps its name and recovers its previous incarnation).
"""

from __future__ import annotations

import os

from ratchet import Ratchet

app = Ratchet(
    os.environ["RATCHET_TEST_URL"],
    allowed_modules=["chaos_jobs"],
    node_name=os.environ.get("RATCHET_CHAOS_NODE"),
)
