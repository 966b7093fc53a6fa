"""Backoff delays and the retry / dead-letter decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.domain.options import MAX_BACKOFF, BackoffPolicy
from ratchet.domain.retry import (
    DefaultRetryPolicy,
    DoNotRetry,
    RetryDecision,
    backoff_delay,
    decide_retry,
    do_not_retry,
    is_do_not_retry,
)

NOW = datetime(2024, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)

bases = st.integers(0, int(MAX_BACKOFF / timedelta(microseconds=1))).map(
    lambda us: timedelta(microseconds=us)
)
# Above attempt 30, large bases overflow: see test_exponential_backoff_never_overflows.
attempts = st.integers(1, 1000)


# --------------------------------------------------------------------------- backoff


def test_backoff_examples() -> None:
    assert backoff_delay(BackoffPolicy.NONE, 10 * S, 3) == timedelta(0)
    assert backoff_delay(BackoffPolicy.FIXED, 10 * S, 1) == 10 * S
    assert backoff_delay(BackoffPolicy.FIXED, 10 * S, 9) == 10 * S
    assert [backoff_delay(BackoffPolicy.EXPONENTIAL, S, a) for a in range(1, 6)] == [
        S,
        2 * S,
        4 * S,
        8 * S,
        16 * S,
    ]
    assert backoff_delay(BackoffPolicy.EXPONENTIAL, timedelta(hours=1), 5) == timedelta(hours=16)
    assert backoff_delay(BackoffPolicy.EXPONENTIAL, timedelta(hours=1), 6) == MAX_BACKOFF
    assert backoff_delay(BackoffPolicy.FIXED, timedelta(days=3), 1) == MAX_BACKOFF
    assert backoff_delay(BackoffPolicy.EXPONENTIAL, timedelta(days=3), 1) == MAX_BACKOFF


@pytest.mark.parametrize("policy", list(BackoffPolicy))
@pytest.mark.parametrize("attempt", [0, -1])
def test_attempts_are_one_based(policy: BackoffPolicy, attempt: int) -> None:
    with pytest.raises(ValueError):
        backoff_delay(policy, S, attempt)


@given(policy=st.sampled_from(list(BackoffPolicy)), base=bases, attempt=attempts)
def test_backoff_formula(policy: BackoffPolicy, base: timedelta, attempt: int) -> None:
    delay = backoff_delay(policy, base, attempt)
    assert timedelta(0) <= delay <= MAX_BACKOFF
    if policy is BackoffPolicy.NONE:
        assert delay == timedelta(0)
    elif policy is BackoffPolicy.FIXED:
        assert delay == base
    else:
        micros = base // timedelta(microseconds=1) * 2 ** (attempt - 1)
        cap = MAX_BACKOFF // timedelta(microseconds=1)
        assert delay == timedelta(microseconds=min(micros, cap))


@given(base=st.integers(0, 10 * 86_400).map(lambda s: timedelta(seconds=s)), attempt=attempts)
def test_backoff_is_capped_at_24_hours_for_any_base(base: timedelta, attempt: int) -> None:
    for policy in BackoffPolicy:
        assert timedelta(0) <= backoff_delay(policy, base, attempt) <= timedelta(hours=24)


@given(base=bases, first=attempts, second=attempts)
def test_exponential_backoff_is_monotone_in_attempt(
    base: timedelta, first: int, second: int
) -> None:
    low, high = sorted((first, second))
    assert backoff_delay(BackoffPolicy.EXPONENTIAL, base, low) <= backoff_delay(
        BackoffPolicy.EXPONENTIAL, base, high
    )


@pytest.mark.parametrize(
    ("base", "attempt"),
    [(timedelta(hours=24), 31), (timedelta(hours=1), 41), (timedelta(minutes=5), 1000)],
)
def test_exponential_backoff_never_overflows(base: timedelta, attempt: int) -> None:
    assert backoff_delay(BackoffPolicy.EXPONENTIAL, base, attempt) == MAX_BACKOFF


# --------------------------------------------------------------------------- decide_retry


@do_not_retry
class Poison(Exception):
    pass


class PoisonChild(Poison):
    pass


class Permanent(DoNotRetry):
    pass


class MixedIn(KeyError, Permanent):
    pass


class RecordingPolicy:
    def __init__(self, allow: bool = True, delay: timedelta | None = None) -> None:
        self.allow = allow
        self.custom_delay = delay
        self.calls: list[tuple[int, BaseException]] = []

    def should_retry(self, attempt: int, exc: BaseException) -> bool:
        self.calls.append((attempt, exc))
        return self.allow

    def delay(self, attempt: int) -> timedelta | None:
        return self.custom_delay


def decide(
    attempt: int = 1,
    max_retries: int = 3,
    exc: BaseException | None = None,
    policy: RecordingPolicy | None = None,
    backoff: BackoffPolicy = BackoffPolicy.FIXED,
    base: timedelta = 10 * S,
) -> RetryDecision:
    return decide_retry(
        attempt=attempt,
        max_retries=max_retries,
        exc=exc if exc is not None else RuntimeError("boom"),
        now=NOW,
        backoff=backoff,
        backoff_base=base,
        policy=policy,
    )


def test_do_not_retry_marks_the_class_and_its_subclasses() -> None:
    assert do_not_retry(Poison) is Poison
    assert is_do_not_retry(Poison())
    assert is_do_not_retry(PoisonChild())
    assert is_do_not_retry(Permanent())
    assert is_do_not_retry(MixedIn())
    assert not is_do_not_retry(RuntimeError())
    assert not is_do_not_retry(KeyError())  # marking a subclass never marks its bases


@pytest.mark.parametrize("exc", [Poison(), PoisonChild(), Permanent(), MixedIn()])
def test_do_not_retry_dead_letters_even_with_retries_left(exc: BaseException) -> None:
    policy = RecordingPolicy(allow=True)
    decision = decide(attempt=1, max_retries=10, exc=exc, policy=policy)
    assert decision == RetryDecision(False, None, decision.reason)
    assert decision.dead_letter
    assert "do-not-retry" in decision.reason
    assert policy.calls == []  # checked before the policy


def test_a_policy_refusing_dead_letters_even_with_retries_left() -> None:
    exc = RuntimeError("x")
    policy = RecordingPolicy(allow=False)
    decision = decide(attempt=2, max_retries=10, exc=exc, policy=policy)
    assert decision.dead_letter
    assert decision.retry_at is None
    assert policy.calls == [(2, exc)]


def test_the_policy_is_consulted_before_max_retries() -> None:
    policy = RecordingPolicy(allow=True)
    assert decide(attempt=4, max_retries=3, policy=policy).dead_letter
    assert len(policy.calls) == 1


def test_custom_policy_delay_overrides_the_backoff() -> None:
    policy = RecordingPolicy(delay=timedelta(seconds=7))
    decision = decide(policy=policy, backoff=BackoffPolicy.EXPONENTIAL, base=timedelta(hours=1))
    assert decision.retry
    assert decision.retry_at == NOW + timedelta(seconds=7)


@pytest.mark.parametrize("custom", [None, timedelta(0)])
def test_no_or_zero_custom_delay_falls_back_to_the_backoff(custom: timedelta | None) -> None:
    decision = decide(
        attempt=3, policy=RecordingPolicy(delay=custom), backoff=BackoffPolicy.EXPONENTIAL
    )
    assert decision.retry_at == NOW + 40 * S


def test_default_policy_always_allows_and_leaves_the_delay_to_the_backoff() -> None:
    policy = DefaultRetryPolicy()
    assert policy.should_retry(99, RuntimeError())
    assert policy.delay(1) is None
    assert decide(attempt=1, policy=None).retry_at == NOW + 10 * S


@given(
    attempt=attempts,
    max_retries=st.integers(0, 40),
    backoff=st.sampled_from(list(BackoffPolicy)),
    base=st.integers(0, 3600).map(lambda s: timedelta(seconds=s)),
)
def test_retry_iff_attempt_within_max_retries(
    attempt: int, max_retries: int, backoff: BackoffPolicy, base: timedelta
) -> None:
    decision = decide(attempt=attempt, max_retries=max_retries, backoff=backoff, base=base)
    assert decision.retry is (attempt <= max_retries)
    assert decision.dead_letter is (not decision.retry)
    if decision.retry:
        assert decision.retry_at == NOW + backoff_delay(backoff, base, attempt)
        assert decision.retry_at >= NOW
    else:
        assert decision.retry_at is None


@settings(max_examples=50)
@given(max_retries=st.integers(0, 25), backoff=st.sampled_from(list(BackoffPolicy)))
def test_max_retries_n_gives_exactly_n_retries_then_the_dlq(
    max_retries: int, backoff: BackoffPolicy
) -> None:
    """Simulate a job that always fails: N retries, N + 1 executions, then the DLQ."""
    now = NOW
    executions = 0
    retries = 0
    failed_attempts = 0
    while True:
        executions += 1
        failed_attempts += 1  # the attempt counter is incremented before deciding
        decision = decide_retry(
            attempt=failed_attempts,
            max_retries=max_retries,
            exc=RuntimeError("always"),
            now=now,
            backoff=backoff,
            backoff_base=S,
        )
        if decision.dead_letter:
            break
        assert decision.retry_at is not None
        assert decision.retry_at - now == backoff_delay(backoff, S, failed_attempts)
        retries += 1
        now = decision.retry_at
    assert retries == max_retries
    assert executions == max_retries + 1
