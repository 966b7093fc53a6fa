"""A FastAPI application whose requests enqueue Ratchet jobs in their own transaction."""
