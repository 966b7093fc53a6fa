"""When a worker claims for other processes' wakeup hints (``ratchet.engine.hint_response``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fixed_random import Fixed
from hypothesis import given
from hypothesis import strategies as st

from ratchet.config import WorkerConfig
from ratchet.domain.errors import ConfigurationError
from ratchet.engine.hint_response import HintResponder


def responder(fraction: float = 0.5) -> HintResponder:
    return HintResponder(spread_per_node=0.02, max_spread=1.0, rng=Fixed(fraction))


def test_own_hints_and_a_node_alone_claim_at_once() -> None:
    hints = responder()
    assert hints.on_new_work(1, 100.0, 10, remote=False) == 0
    assert hints.on_new_work(1, 100.0, 1, remote=True) == 0
    assert hints.respond_at is None  # nothing planned: the caller polls now
    assert hints.announced == 2


def test_another_process_hint_is_answered_within_a_window_that_grows_with_the_nodes() -> None:
    assert responder().window(1) == 0
    assert responder().window(11) == pytest.approx(0.2)
    assert responder().window(500) == 1.0  # capped
    hints = responder(fraction=0.5)
    assert hints.on_new_work(1, 100.0, 11, remote=True) == pytest.approx(0.1)
    assert hints.respond_at == pytest.approx(100.1)


def test_the_window_narrows_with_the_jobs_announced() -> None:
    hints = responder(fraction=1.0)
    assert hints.on_new_work(4, 0.0, 11, remote=True) == pytest.approx(0.05)  # 0.2 / 4
    bulk = responder(fraction=1.0)
    assert bulk.on_new_work(10_000, 0.0, 11, remote=True) == pytest.approx(0.2 / 10_000)


def test_a_later_hint_never_postpones_a_planned_claim() -> None:
    hints = responder(fraction=0.25)
    assert hints.on_new_work(1, 0.0, 11, remote=True) == pytest.approx(0.05)
    hints._rng = Fixed(1.0)
    assert hints.on_new_work(1, 0.01, 11, remote=True) is None  # 0.01 + 0.1 > 0.05
    assert hints.respond_at == pytest.approx(0.05)
    assert hints.announced == 2


def test_a_report_covering_the_announced_jobs_cancels_the_planned_claim() -> None:
    hints = responder()
    hints.on_new_work(1, 0.0, 11, remote=True)
    hints.on_claimed_elsewhere(1)
    assert hints.respond_at is None and hints.announced == 0
    assert not hints.take_due(10.0)


def test_a_report_of_an_earlier_claim_does_not_cancel_a_later_hint() -> None:
    hints = responder()
    hints.on_new_work(1, 0.0, 11, remote=True)  # job A
    hints.on_new_work(1, 0.001, 11, remote=True)  # job B, submitted while A was claimed
    hints.on_claimed_elsewhere(1)  # the claim that took A
    assert hints.announced == 1
    assert not hints.take_due(0.0)  # not due yet
    assert hints.take_due(1.0)  # B is still claimed for
    assert hints.respond_at is None
    assert not hints.take_due(2.0)  # one claim answers every hint so far


def test_a_short_poll_reports_what_it_took_and_forgets_the_rest() -> None:
    hints = responder()
    hints.on_new_work(3, 0.0, 11, remote=True)
    assert hints.on_poll(claimed=2, wanted=64) == 2
    assert hints.announced == 0 and hints.respond_at is None
    assert hints.on_poll(claimed=5, wanted=64) == 0  # nothing was announced: no report


def test_a_full_poll_leaves_the_rest_to_others_and_reports_nothing() -> None:
    hints = responder()
    hints.on_new_work(500, 0.0, 11, remote=True)
    assert hints.on_poll(claimed=100, wanted=100) == 0
    assert hints.announced == 400


def test_an_empty_poll_reports_nothing_and_a_poll_without_free_slots_changes_nothing() -> None:
    hints = responder()
    hints.on_new_work(1, 0.0, 11, remote=True)
    assert hints.on_poll(claimed=0, wanted=0) == 0
    assert hints.announced == 1 and hints.respond_at is not None
    assert hints.on_poll(claimed=0, wanted=10) == 0
    assert hints.announced == 0


def test_a_zero_spread_answers_every_hint_at_once_as_the_config_allows() -> None:
    hints = HintResponder.spreading(0.0)
    assert hints.on_new_work(1, 5.0, 40, remote=True) == 0
    assert HintResponder.spreading(0.02).window(1_000) == pytest.approx(1.0)  # 50 x 20 ms
    assert WorkerConfig(hint_spread=timedelta(0)).hint_spread == timedelta(0)
    with pytest.raises(ConfigurationError, match="hint_spread must not be negative"):
        WorkerConfig(hint_spread=timedelta(milliseconds=-1))


def test_the_counters_tell_made_and_skipped_claims_apart() -> None:
    hints = responder()
    hints.on_new_work(1, 0.0, 11, remote=True)
    hints.on_claimed_elsewhere(1)  # skipped
    hints.on_new_work(1, 1.0, 11, remote=True)
    assert hints.take_due(5.0)  # made
    assert hints.on_poll(claimed=1, wanted=10) == 1  # to report (the worker counts it sent)
    hints.on_claimed_elsewhere(3)  # nothing planned: not a skip
    assert (hints.claims_made, hints.claims_skipped) == (1, 1)


def test_negative_spreads_are_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        HintResponder(spread_per_node=-1)


events = st.lists(
    st.one_of(
        st.tuples(st.just("hint"), st.integers(1, 50), st.booleans(), st.integers(1, 80)),
        st.tuples(st.just("report"), st.integers(0, 60)),
        st.tuples(st.just("poll"), st.integers(0, 100), st.integers(0, 100)),
        st.tuples(st.just("tick"), st.floats(0, 2)),
    ),
    max_size=60,
)


@given(events, st.floats(0, 1))
def test_the_account_stays_consistent(script: list[tuple[Any, ...]], fraction: float) -> None:
    hints = responder(fraction)
    now = 0.0
    for step in script:
        kind = step[0]
        if kind == "hint":
            _, jobs, remote, nodes = step
            before = hints.announced
            delay = hints.on_new_work(jobs, now, nodes, remote=remote)
            assert hints.announced == before + jobs
            assert delay is None or 0 <= delay <= hints.window(nodes)
        elif kind == "report":
            hints.on_claimed_elsewhere(step[1])
        elif kind == "poll":
            _, claimed, wanted = step
            claimed = min(claimed, wanted)
            knew = hints.announced > 0
            report = hints.on_poll(claimed, wanted)
            assert report <= claimed
            assert report == 0 or (knew and claimed < wanted)
            if wanted > 0 and claimed < wanted:
                assert hints.announced == 0 and hints.respond_at is None
        else:
            now += step[1]
            planned = hints.respond_at
            due = hints.take_due(now)
            assert not due or (planned is not None and planned <= now)
        assert hints.announced >= 0
        if hints.announced == 0:
            assert hints.respond_at is None
