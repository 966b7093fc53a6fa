"""For separate worker processes: ``ratchet worker app.worker:ratchet_app``."""

from __future__ import annotations

import os

from app.main import DEFAULT_URL, make_ratchet

ratchet_app = make_ratchet(os.environ.get("FASTAPI_APP_DATABASE_URL", DEFAULT_URL))
