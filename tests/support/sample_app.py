"""An app module for worker subprocesses: ``ratchet worker sample_app:app``.

The database URL comes from ``RATCHET_TEST_URL``.
"""

from __future__ import annotations

import os

from ratchet import Ratchet

app = Ratchet(
    os.environ["RATCHET_TEST_URL"],
    allowed_modules=["sample_jobs"],
    coordinator=os.environ.get("RATCHET_TEST_COORDINATOR", "local"),
)
