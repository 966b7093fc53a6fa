"""The watchdog's three steps on a FakeClock, the attempt's cancellation request, and the rules
that decide whether a ``CancellationRequestedException`` counts as a timeout. No sleeping."""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from datetime import timedelta

import pytest
from timeout_harness import CLAIMED_TIMEOUT
from timeout_harness import claimed_job as job

from ratchet import CancellationRequestedException, JobContext, JobTimeoutError
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.model import ClaimedJob
from ratchet.domain.timeouts import TimeoutSettings, WatchdogStep, plan_attempt
from ratchet.engine.context import AttemptCancellation, bound, stopped_on_request
from ratchet.engine.running import Attempt
from ratchet.engine.watchdog import CANCEL_REQUEST_BACKSTOP, CancellationRequestPoller, Watchdog
from ratchet.testing import FakeClock

T = CLAIMED_TIMEOUT
S = WatchdogStep


class Recorder(logging.Handler):
    """Watches a watchdog: which step happened at which elapsed second, in order."""

    def __init__(self, clock: FakeClock, grace: timedelta, timeout: timedelta = T) -> None:
        super().__init__(logging.WARNING)
        self.clock = clock
        self.events: list[tuple[float, str]] = []
        self.deadlines: list[Attempt] = []
        self.zombie_checks: list[Attempt] = []
        self.watchdog = Watchdog(
            clock,
            TimeoutSettings(cancellation_grace=grace),
            on_deadline=self._deadline,
            on_zombie_check=self.zombie_checks.append,
        )
        self.start = clock.now()
        self.attempt = self.watchdog.begin(job(timeout, clock), self.start)
        self.attempt.cancellation.add_listener(
            lambda: self.events.append((self.elapsed(), "request"))
        )

    def elapsed(self) -> float:
        return (self.clock.now() - self.start).total_seconds()

    def _deadline(self, attempt: Attempt) -> None:
        attempt.cancellation.request("the deadline passed")  # what the worker does first
        self.deadlines.append(attempt)
        self.events.append((self.elapsed(), "deadline"))

    def emit(self, record: logging.LogRecord) -> None:
        if "soft timeout" in record.getMessage():
            self.events.append((self.elapsed(), "soft warning"))

    def run_until(self, seconds: float) -> list[tuple[float, str]]:
        """Advance the clock one second at a time, firing what is due after each step."""
        logger = logging.getLogger("ratchet.watchdog")
        logger.addHandler(self)
        try:
            while self.elapsed() < seconds:
                self.clock.advance(1)
                self.watchdog.run_due()
        finally:
            logger.removeHandler(self)
        return self.events


# ------------------------------------------------------------------ the plan (pure)
@pytest.mark.parametrize(
    ("grace", "expected"),
    [
        (0, [(80, S.SOFT_WARNING), (100, S.DEADLINE)]),
        (10, [(80, S.SOFT_WARNING), (90, S.CANCELLATION_REQUEST), (100, S.DEADLINE)]),
        (30, [(70, S.CANCELLATION_REQUEST), (80, S.SOFT_WARNING), (100, S.DEADLINE)]),
        (100, [(80, S.SOFT_WARNING), (100, S.DEADLINE)]),
        (150, [(80, S.SOFT_WARNING), (100, S.DEADLINE)]),
    ],
    ids=[
        "grace-0",
        "grace-below-margin",
        "grace-above-margin",
        "grace-equals-timeout",
        "grace-above-timeout",
    ],
)
def test_plan_orders_the_three_steps(grace: int, expected: list[tuple[int, S]]) -> None:
    start = FakeClock().now()
    plan = plan_attempt(start, T, TimeoutSettings(cancellation_grace=timedelta(seconds=grace)))
    assert [((when - start).total_seconds(), step) for when, step in plan.steps] == expected
    assert plan.deadline == start + T


def test_a_job_without_timeout_gets_the_default_sla() -> None:
    start = FakeClock().now()
    plan = plan_attempt(start, None, TimeoutSettings())
    assert plan.timeout == timedelta(minutes=30)
    assert plan.due_at(S.SOFT_WARNING) == start + timedelta(minutes=24)
    assert plan.due_at(S.CANCELLATION_REQUEST) is None


@pytest.mark.parametrize(
    "settings",
    [
        {"soft_timeout_percent": 0},
        {"soft_timeout_percent": 100},
        {"default_sla": timedelta(0)},
        {"cancellation_grace": timedelta(seconds=-1)},
    ],
)
def test_settings_are_checked(settings: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        TimeoutSettings(**settings)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the watchdog on a FakeClock
@pytest.mark.parametrize(
    ("grace", "expected"),
    [
        (0, [(80, "soft warning"), (100, "request"), (100, "deadline")]),
        (10, [(80, "soft warning"), (90, "request"), (100, "deadline")]),
        (30, [(70, "request"), (80, "soft warning"), (100, "deadline")]),
        (100, [(80, "soft warning"), (100, "request"), (100, "deadline")]),
    ],
    ids=["grace-0", "grace-below-margin", "grace-above-margin", "grace-not-shorter-than-timeout"],
)
def test_watchdog_fires_steps_at_their_times(grace: int, expected: list[tuple[int, str]]) -> None:
    rec = Recorder(FakeClock(), timedelta(seconds=grace))
    assert rec.run_until(120) == expected
    assert rec.deadlines == [rec.attempt]
    assert rec.watchdog.pending() == 0


def test_soft_warning_names_the_job_and_elapsed_time(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    rec = Recorder(clock, timedelta(0))
    caplog.set_level(logging.WARNING, logger="ratchet.watchdog")
    clock.advance(79)
    assert rec.watchdog.run_due() == 0
    clock.advance(1)
    assert rec.watchdog.run_due() == 1
    (record,) = caplog.records
    assert str(rec.attempt.job.job_id) in record.getMessage()
    assert "has run 80s, 80% of its 100s timeout" in record.getMessage()
    assert not rec.attempt.cancellation.is_requested()
    assert rec.deadlines == []


def test_request_step_sets_the_flag_only(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    rec = Recorder(clock, timedelta(seconds=30))
    clock.advance(70)
    rec.watchdog.run_due()
    assert rec.attempt.cancellation.is_requested()
    assert rec.attempt.cancellation.requested_at == clock.now()
    assert "30s away" in rec.attempt.cancellation.reason
    assert rec.deadlines == [] and not rec.attempt.finished


def test_a_finished_attempt_gets_no_more_steps() -> None:
    clock = FakeClock()
    rec = Recorder(clock, timedelta(seconds=10))
    clock.advance(50)
    assert rec.attempt.finish()
    rec.watchdog.forget(rec.attempt)
    clock.advance(100)
    assert rec.watchdog.run_due() == 0
    assert rec.deadlines == []
    assert not rec.attempt.cancellation.is_requested()


def test_steps_that_are_all_overdue_fire_in_order_at_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    rec = Recorder(clock, timedelta(seconds=30))
    caplog.set_level(logging.INFO, logger="ratchet.watchdog")
    clock.advance(500)  # a clock jump past every step
    assert rec.watchdog.run_due() == 3
    assert rec.attempt.cancellation.is_requested()
    assert rec.deadlines == [rec.attempt]
    messages = [r.getMessage() for r in caplog.records]
    assert "cancellation requested" in messages[0] and "soft timeout" in messages[1]


def test_zombie_check_fires_at_its_time() -> None:
    clock = FakeClock()
    rec = Recorder(clock, timedelta(0))
    clock.advance(100)
    rec.watchdog.run_due()
    rec.watchdog.check_zombie_at(clock.now() + timedelta(seconds=1), rec.attempt)
    assert rec.watchdog.run_due() == 0
    clock.advance(1)
    assert rec.watchdog.run_due() == 1
    assert rec.zombie_checks == [rec.attempt]


def test_finished_attempts_leave_the_watchdog_at_once() -> None:
    """An attempt that ends before its first step (nearly every one) leaves its lane on
    ``forget``: nothing of it stays to be swept, and the live ones still fire."""
    clock = FakeClock()
    watchdog = Watchdog(clock, TimeoutSettings(), on_deadline=lambda a: None)
    attempts = [watchdog.begin(job(T, clock), clock.now()) for _ in range(3000)]
    assert watchdog.pending() == 3000
    for attempt in attempts[:2500]:
        attempt.finish()
        watchdog.forget(attempt)
    assert watchdog.pending() == 500
    clock.advance(T)
    assert watchdog.run_due() == 500 * 2  # soft warning + deadline of each live attempt
    assert watchdog.pending() == 0


def test_steps_fire_in_time_order_across_timeouts_and_out_of_order_begins() -> None:
    """Attempts of different timeouts, and one that began at an earlier time than the last
    of its timeout (another thread read the clock first, or the clock went back), each fire
    at their own times: the next wake-up is the earliest of them."""
    clock = FakeClock()
    fired: list[tuple[float, str]] = []
    start = clock.now()
    watchdog = Watchdog(
        clock,
        TimeoutSettings(),
        on_deadline=lambda a: fired.append(((clock.now() - start).total_seconds(), a.job.target)),
    )
    clock.advance(5)
    late = watchdog.begin(named(timedelta(seconds=10), clock, "m:late"), clock.now())
    early = watchdog.begin(named(timedelta(seconds=10), clock, "m:early"), start)
    short = watchdog.begin(named(timedelta(seconds=3), clock, "m:short"), clock.now())
    assert watchdog.next_due() == start + timedelta(seconds=7.4)  # short: 5 + 80 % of 3
    for second in range(6, 16):
        clock.advance(1)
        watchdog.run_due()
        assert all(at <= second for at, _ in fired)
    assert fired == [(8.0, "m:short"), (10.0, "m:early"), (15.0, "m:late")]
    for attempt in (late, early, short):
        assert attempt.plan.deadline - start == timedelta(seconds=fired_at(fired, attempt))
    assert watchdog.pending() == 0 and watchdog.next_due() is None


def named(timeout: timedelta, clock: FakeClock, target: str) -> ClaimedJob:
    return dataclasses.replace(job(timeout, clock), target=target)


def fired_at(fired: list[tuple[float, str]], attempt: Attempt) -> float:
    return next(at for at, target in fired if target == attempt.job.target)


def test_watchdog_thread_follows_the_injected_clock() -> None:
    clock = FakeClock()
    fired = threading.Event()
    watchdog = Watchdog(clock, TimeoutSettings(), on_deadline=lambda a: fired.set(), max_wait=3600)
    watchdog.begin(job(T, clock), clock.now())
    watchdog.start()
    try:
        assert not fired.wait(0.05)
        clock.advance(T)
        watchdog.wake()
        assert fired.wait(5)
    finally:
        watchdog.stop()


# ------------------------------------------------------------------ the attempt
def test_attempt_finish_is_a_compare_and_set() -> None:
    attempt = Attempt(job(), plan_attempt(FakeClock().now(), T, TimeoutSettings()))
    assert attempt.finish(timed_out=True)
    assert not attempt.finish()
    assert attempt.timed_out


def test_watch_delivers_the_interrupt_only_while_installed() -> None:
    attempt = Attempt(job(), plan_attempt(FakeClock().now(), T, TimeoutSettings()))
    calls: list[str] = []
    with attempt.watch(interrupt=lambda: calls.append("interrupt")):
        assert attempt.finish(timed_out=True)
        assert attempt.interrupt()
    assert calls == ["interrupt"] and attempt.interrupted
    assert not attempt.interrupt()
    with pytest.raises(JobTimeoutError), attempt.watch():
        pass  # entering after the deadline raises at once


def test_on_request_runs_now_if_already_requested() -> None:
    attempt = Attempt(job(), plan_attempt(FakeClock().now(), T, TimeoutSettings()))
    calls: list[str] = []
    with attempt.watch(on_request=lambda: calls.append("later")):
        attempt.cancellation.request("x")
    attempt.cancellation.request("again")  # set once only
    with attempt.watch(on_request=lambda: calls.append("now")):
        pass
    assert calls == ["later", "now"]


# ------------------------------------------------------------------ JobContext and the exception
def context(deadline_state: AttemptCancellation | None = None) -> JobContext:
    return JobContext(
        job_id=uuid.uuid4(),
        attempt=1,
        epoch=1,
        node_id="n",
        scheduled_time=FakeClock().now(),
        cancellation=deadline_state,
    )


def test_context_without_a_watched_attempt() -> None:
    ctx = context()
    assert ctx.deadline() is None
    assert not ctx.is_cancellation_requested()
    ctx.throw_if_cancellation_requested()


def test_context_of_a_watched_attempt() -> None:
    when = FakeClock().now() + T
    state = AttemptCancellation(when)
    ctx = context(state)
    assert ctx.deadline() == when
    ctx.throw_if_cancellation_requested()
    state.request("the deadline is 10s away")
    assert ctx.is_cancellation_requested()
    with pytest.raises(CancellationRequestedException, match="10s away") as info:
        ctx.throw_if_cancellation_requested()
    assert stopped_on_request(info.value, state.token)


def test_exception_created_before_the_request_is_an_ordinary_failure() -> None:
    state = AttemptCancellation()
    with bound(context(state)):
        early = CancellationRequestedException()
        state.request("now")
        late = CancellationRequestedException()
    assert not stopped_on_request(early, state.token)
    assert stopped_on_request(late, state.token)


def test_exception_of_another_attempt_is_an_ordinary_failure() -> None:
    first, second = AttemptCancellation(), AttemptCancellation()
    first.request("x")
    second.request("x")
    with bound(context(first)):
        kept = CancellationRequestedException()
    assert stopped_on_request(kept, first.token)
    assert not stopped_on_request(kept, second.token)


def test_cause_context_and_groups_count() -> None:
    state = AttemptCancellation()
    state.request("x")
    with bound(context(state)):
        inner = CancellationRequestedException()
    caused = RuntimeError("wrapper")
    caused.__cause__ = inner
    chained = ValueError("in handler")
    chained.__context__ = caused
    group = ExceptionGroup("many", [KeyError("k"), chained])
    for exc in (inner, caused, chained, group):
        assert stopped_on_request(exc, state.token)
    assert not stopped_on_request(RuntimeError("unrelated"), state.token)


def test_cyclic_chains_terminate() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert not stopped_on_request(a, AttemptCancellation().token)


def test_for_context_builds_it_on_another_thread() -> None:
    state = AttemptCancellation()
    ctx = context(state)
    state.request("x")
    made: dict[str, BaseException] = {}

    def helper() -> None:
        made["plain"] = CancellationRequestedException("no context here")
        made["for_context"] = CancellationRequestedException.for_context("bound", ctx)

    with bound(ctx):
        thread = threading.Thread(target=helper)
        thread.start()
        thread.join()
    assert not stopped_on_request(made["plain"], state.token)
    assert stopped_on_request(made["for_context"], state.token)


@pytest.mark.parametrize(
    ("interval", "announced", "expected"),
    [
        (timedelta(seconds=1), False, timedelta(seconds=1)),
        (timedelta(seconds=1), True, CANCEL_REQUEST_BACKSTOP),
        (timedelta(minutes=5), True, timedelta(minutes=5)),
    ],
)
def test_requests_announced_by_the_coordinator_are_polled_only_as_a_backstop(
    interval: timedelta, announced: bool, expected: timedelta
) -> None:
    assert CancellationRequestPoller.every(interval, announced=announced).interval == expected
