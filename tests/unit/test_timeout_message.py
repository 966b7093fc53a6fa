"""A timed-out attempt's ``JobTimeoutError`` always says what happened."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest

from ratchet import JobTimeoutError
from ratchet.adapters.threads import run_interruptibly


class Control:
    """An AttemptControl whose interrupt a test fires from another thread."""

    def __init__(self, message: str | None = None) -> None:
        self.deadline = datetime(2030, 1, 1, tzinfo=UTC)
        self.interrupt: Callable[[], object] | None = None
        self.installed = threading.Event()
        if message is not None:
            self.timeout_message = lambda: message

    def is_cancellation_requested(self) -> bool:
        return False

    @contextmanager
    def watch(
        self,
        *,
        interrupt: Callable[[], object] | None = None,
        on_request: Callable[[], None] | None = None,
    ) -> Iterator[None]:
        self.interrupt = interrupt
        self.installed.set()
        yield


def spin() -> None:
    end = time.monotonic() + 10
    while time.monotonic() < end:  # Python bytecode: the interrupt lands here
        pass


def interrupted(control: Control) -> JobTimeoutError:
    def fire() -> None:
        assert control.installed.wait(5)
        time.sleep(0.05)
        assert control.interrupt is not None
        control.interrupt()

    threading.Thread(target=fire, daemon=True).start()
    with pytest.raises(JobTimeoutError) as info:
        run_interruptibly(spin, control)  # type: ignore[arg-type]
    return info.value


def test_the_interrupt_carries_the_attempts_message() -> None:
    error = interrupted(Control("job 42 attempt 1 exceeded its 30s timeout"))
    assert str(error) == "job 42 attempt 1 exceeded its 30s timeout"
    assert error.__traceback__ is not None
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "spin" in frames, "the traceback shows where the call was at the deadline"


def test_without_a_message_of_its_own_the_deadline_is_named() -> None:
    error = interrupted(Control())
    assert str(error) == (
        "the attempt ran past its deadline (2030-01-01T00:00:00+00:00) and was interrupted"
    )


def test_a_bare_job_timeout_error_is_never_blank() -> None:
    assert str(JobTimeoutError()) == "the attempt ran past its deadline and was interrupted"
    assert str(JobTimeoutError("given")) == "given"
