"""Runs the watcher conformance suite over every backend of the ``store`` fixture."""

from __future__ import annotations

from ratchet.testing.watcher_contract import WatcherStoreContract


class TestWatcherStore(WatcherStoreContract):
    pass
