"""App module for worker subprocesses of the workflow tests: ``ratchet worker flow_app:app``."""

from __future__ import annotations

import os

from ratchet import Ratchet

app = Ratchet(os.environ["RATCHET_TEST_URL"], allowed_modules=["flow_jobs"])
