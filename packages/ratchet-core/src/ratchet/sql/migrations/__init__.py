"""Alembic migrations of the Ratchet schema."""
