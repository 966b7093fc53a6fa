"""No Django models: Ratchet's tables belong to Ratchet's own migrations (see ``apps.py``).

The module exists so that Django sends this app ``post_migrate``."""
