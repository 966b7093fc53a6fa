"""``quick_init``: the same constructor as the dataclass's own, minus ``object.__setattr__``."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.model import ClaimedJob, NewJob, Outcome
from ratchet.domain.polling import PollDelay, PollResult
from ratchet.domain.quick_init import quick_init
from ratchet.domain.timeouts import AttemptPlan
from ratchet.engine.context import JobContext
from ratchet.ports import JobCall


def _declare(quick: bool) -> Any:
    @dataclass(frozen=True)
    class Value:
        a: int
        b: str
        c: int | None = None
        tags: list[str] = field(default_factory=list)
        seen: list[str] = field(default_factory=list, compare=False)
        note: str = field(default="n", kw_only=True)

        def __post_init__(self) -> None:
            self.seen.append(f"{self.a}:{self.b}")

    return quick_init(Value) if quick else Value


QUICK, PLAIN = _declare(True), _declare(False)


@given(
    a=st.integers(),
    b=st.text(),
    c=st.none() | st.integers(),
    tags=st.none() | st.lists(st.text(), max_size=3),
    note=st.none() | st.text(),
)
def test_it_builds_what_the_dataclass_init_builds(
    a: int, b: str, c: int | None, tags: list[str] | None, note: str | None
) -> None:
    kwargs: dict[str, Any] = {"c": c}
    if tags is not None:
        kwargs["tags"] = tags
    if note is not None:
        kwargs["note"] = note
    quick, plain = QUICK(a, b, **kwargs), PLAIN(a, b, **kwargs)
    assert vars(quick) == vars(plain)
    assert quick.seen == [f"{a}:{b}"], "__post_init__ ran once"


def test_the_value_stays_frozen_and_defaults_are_fresh() -> None:
    first, second = QUICK(1, "x"), QUICK(1, "x")
    assert first == second
    assert first.tags is not second.tags
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.a = 2
    assert dataclasses.replace(first, a=3).a == 3
    assert repr(first).startswith("_declare.<locals>.Value(a=1, b='x'")


def test_it_refuses_what_the_dataclass_init_refuses() -> None:
    with pytest.raises(TypeError):
        QUICK(1)
    with pytest.raises(TypeError):
        QUICK(1, "x", 3, [], [], "positional note")
    with pytest.raises(TypeError):
        QUICK(1, "x", unknown=1)


def test_it_takes_only_frozen_dataclasses_with_a_dict() -> None:
    @dataclass
    class Mutable:
        a: int

    @dataclass(frozen=True, slots=True)
    class Slotted:
        a: int

    @dataclass(frozen=True)
    class Derived:
        a: int
        b: int = field(init=False, default=0)

    for cls in (Mutable, Slotted, Derived, int):
        with pytest.raises(TypeError):
            quick_init(cls)


@pytest.mark.parametrize(
    "cls", [NewJob, Outcome, ClaimedJob, AttemptPlan, JobCall, JobContext, PollResult, PollDelay]
)
def test_each_hot_value_keeps_its_dataclass_signature(cls: type) -> None:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for param, f in zip(params, fields, strict=True):
        kind = param.KEYWORD_ONLY if f.kw_only else param.POSITIONAL_OR_KEYWORD
        assert param.kind == kind, f.name
        if f.default is not dataclasses.MISSING:
            assert param.default is f.default, f.name
        elif f.default_factory is dataclasses.MISSING:
            assert param.default is param.empty, f.name
