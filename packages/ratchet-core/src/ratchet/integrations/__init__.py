"""Helpers for web frameworks. Each module imports its framework itself, only when imported:
``ratchet.integrations.starlette`` (Starlette and FastAPI lifespans, the app on the request),
``ratchet.integrations.fastapi`` (dependencies), ``ratchet.integrations.sessions`` (jobs in a
SQLAlchemy session's transaction, no framework)."""
