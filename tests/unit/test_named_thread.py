"""Ratchet's threads carry their names into the operating system (Linux)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

import ratchet.named_thread as named_thread
from ratchet.named_thread import OS_NAME_BYTES, NamedThread, name_os_thread

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="thread names in /proc are Linux's"
)


def os_name(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


@linux_only
@pytest.mark.parametrize(
    ("name", "seen"),
    [("ratchet-poller", "ratchet-poller"), ("ratchet-maintenance", "ratchet-mainten")],
)
def test_a_named_thread_is_named_in_the_os_cut_to_what_linux_keeps(name: str, seen: str) -> None:
    found: list[str] = []
    thread = NamedThread(target=lambda: found.append(os_name(threading.get_native_id())), name=name)
    thread.start()
    thread.join(10)
    assert found == [seen] and len(seen) <= OS_NAME_BYTES
    assert thread.daemon


@linux_only
def test_a_name_the_os_cannot_take_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError("read-only /proc")

    results: list[bool] = []
    names: list[str] = []

    def body() -> None:
        names.append(os_name(threading.get_native_id()))
        monkeypatch.setattr(named_thread, "open", refuse, raising=False)
        results.append(name_os_thread("ratchet-writer"))
        names.append(os_name(threading.get_native_id()))

    thread = threading.Thread(target=body, name="plain")
    thread.start()
    thread.join(10)
    assert results == [False]
    assert names[0] == names[1] != "ratchet-writer"


def test_other_platforms_are_told_no(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(named_thread.sys, "platform", "darwin")
    assert name_os_thread("ratchet-poller") is False
