"""A call the target's signature cannot accept is refused at submit, not dead-lettered later."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import signature_jobs as sj

from ratchet import InvalidJobArguments, InvalidJobTarget, Ratchet
from ratchet.testing import FakeClock


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["signature_jobs"], clock=clock)
    yield app
    app.close()


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "message"),
    [
        (
            sj.two,
            (1,),
            {},
            "signature_jobs:two cannot be called with 1 positional argument: missing a "
            "required argument: 'b'; it takes two(a, b)",
        ),
        (
            sj.two,
            (1, 2, 3),
            {},
            "signature_jobs:two cannot be called with 3 positional arguments: too many "
            "positional arguments; it takes two(a, b)",
        ),
        (
            sj.two,
            (1,),
            {"c": 2},
            "signature_jobs:two cannot be called with 1 positional argument and the keyword c",
        ),
        (sj.keyword_only, ("x",), {}, "too many positional arguments"),
        (sj.keyword_only, (), {}, "missing a required argument: 'when'"),
        (sj.Mailer.send, (), {}, "signature_jobs:Mailer.send#bean cannot be called with 0"),
        (sj.Mailer().send, ("a", "b", "c"), {}, "it takes send(to, subject='hi')"),
        (sj.Mailer.build, (1, 2), {}, "it takes build(n)"),
        (sj.Mailer.check, (), {}, "it takes check(n)"),
    ],
)
def test_enqueue_and_schedule_refuse_what_the_target_cannot_take(
    app: Ratchet,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(InvalidJobArguments) as info:
        app.enqueue(fn, *args, **kwargs)
    assert message in str(info.value)
    assert isinstance(info.value, InvalidJobTarget), "a typed error callers may already catch"
    with pytest.raises(InvalidJobArguments):
        app.schedule(timedelta(minutes=1), fn, *args, **kwargs)
    assert app.list_jobs() == []


@pytest.mark.parametrize(
    ("fn", "args", "kwargs"),
    [
        (sj.two, (1, 2), {}),
        (sj.two, (1,), {"b": 2}),
        (sj.keyword_only, (), {"when": "now"}),
        (sj.anything, (1, 2, 3), {"x": 1}),
        (sj.decorated, (1, 2, 3), {}),  # the wrapper takes anything
        (sj.Mailer.send, ("a",), {}),  # the instance comes from the bean resolver
        (sj.Mailer().send, ("a", "b"), {}),
        (sj.Mailer.build, (1,), {}),
        (sj.Mailer.check, (1,), {}),
    ],
)
def test_calls_that_fit_are_accepted(
    app: Ratchet, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    app.enqueue(fn, *args, **kwargs).submit()


def test_chains_branches_and_replacements_are_checked(app: Ratchet) -> None:
    head = app.enqueue(sj.item, 1)
    with pytest.raises(InvalidJobArguments, match="signature_jobs:two cannot be called"):
        head.then(sj.two, 1)
    with pytest.raises(InvalidJobArguments):
        head.then_on_failure(sj.item)
    with pytest.raises(InvalidJobArguments):
        head.when_result(sj.item, sj.two, 1, 2, 3)
    handle = head.then(sj.two, 1, 2).submit()
    with pytest.raises(InvalidJobArguments):
        app.replace(handle.id, timedelta(0), sj.item)


def test_callbacks_are_checked_against_how_they_are_called(app: Ratchet) -> None:
    builder = app.enqueue(sj.item, 1)
    with pytest.raises(
        InvalidJobArguments, match="on_success callback signature_jobs:callback_without_context"
    ):
        builder.on_success(sj.callback_without_context)
    with pytest.raises(InvalidJobArguments, match=r"on_failure callback .* 2 positional"):
        builder.on_failure(sj.on_failure_without_error)
    builder.submit()


def test_batches_need_a_function_of_one_item(app: Ratchet) -> None:
    with pytest.raises(
        InvalidJobArguments, match="batch item function signature_jobs:item_and_flag"
    ):
        app.enqueue_batch("b").for_each([1, 2], sj.item_and_flag)
    with pytest.raises(InvalidJobArguments, match="batch item function"):
        app.streaming_batch("s").from_iterable([1]).process(sj.two)
    assert app.enqueue_batch("ok").for_each([1, 2], sj.item).submit().context().total == 2


def test_recurring_masters_are_checked(app: Ratchet) -> None:
    with pytest.raises(InvalidJobArguments, match="signature_jobs:item cannot be called"):
        app.schedule_recurring_utc("0 0 * * * ?", sj.item)
    app.schedule_recurring_utc("0 0 * * * ?", sj.item, 5).submit()


def test_signatures_are_read_once_per_callable(
    app: Ratchet, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Any] = []
    real = inspect.signature

    def counting(fn: Any, **kwargs: Any) -> inspect.Signature:
        reads.append(fn)
        return real(fn, **kwargs)

    monkeypatch.setattr(inspect, "signature", counting)
    for n in range(5):
        app.enqueue(sj.keyword_only, when=str(n)).submit()
    assert reads.count(sj.keyword_only) <= 1
