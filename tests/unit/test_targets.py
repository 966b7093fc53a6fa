"""Job targets: what can be stored as ``module:qualname`` and what is refused, and why."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import sample_jobs

from ratchet.domain.errors import InvalidJobTarget, UnknownJobTarget
from ratchet.targets import TargetRef, resolve_attribute, target_of


def test_module_function() -> None:
    ref = target_of(sample_jobs.record)
    assert (ref.module, ref.qualname, ref.bean) == ("sample_jobs", "record", False)
    assert resolve_attribute(ref) is sample_jobs.record
    assert TargetRef.parse(str(ref)) == ref


def test_static_and_class_methods_are_not_beans() -> None:
    assert target_of(sample_jobs.Greeter.static_greet) == TargetRef(
        "sample_jobs", "Greeter.static_greet"
    )
    assert target_of(sample_jobs.Greeter.class_greet) == TargetRef(
        "sample_jobs", "Greeter.class_greet"
    )


def test_instance_methods_are_beans() -> None:
    bound = target_of(sample_jobs.Greeter().greet)
    unbound = target_of(sample_jobs.Greeter.greet)
    assert bound == unbound == TargetRef("sample_jobs", "Greeter.greet", bean=True)
    assert str(bound) == "sample_jobs:Greeter.greet#bean"


def test_lambda_is_refused() -> None:
    with pytest.raises(InvalidJobTarget, match="lambdas cannot be job targets"):
        target_of(lambda: None)


def test_closure_and_nested_function_are_refused() -> None:
    def nested() -> None:
        return None

    with pytest.raises(InvalidJobTarget, match="nested function or closure"):
        target_of(nested)


def test_partial_and_builtins_are_refused() -> None:
    with pytest.raises(InvalidJobTarget):
        target_of(functools.partial(sample_jobs.record, 1))
    with pytest.raises(InvalidJobTarget):
        target_of(print)
    with pytest.raises(InvalidJobTarget, match="must be callable"):
        target_of(42)  # type: ignore[arg-type]


def test_main_module_is_refused() -> None:
    def fake() -> None:
        return None

    fake.__module__ = "__main__"
    fake.__qualname__ = "fake"
    with pytest.raises(InvalidJobTarget, match="__main__"):
        target_of(fake)


def test_unknown_targets_on_resolution() -> None:
    with pytest.raises(UnknownJobTarget, match="cannot import module"):
        resolve_attribute(TargetRef("no_such_module_xyz", "f"))
    with pytest.raises(UnknownJobTarget, match="has no attribute"):
        resolve_attribute(TargetRef("sample_jobs", "gone"))
    with pytest.raises(UnknownJobTarget, match="module:qualname"):
        TargetRef.parse("not-a-reference")


def test_a_redefined_function_is_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference of a function is remembered after its first check, but only while its
    module still names that very function."""
    import sys
    import types

    module = types.ModuleType("ratchet_redefined_jobs")
    exec("def job(n):\n    return n\n", module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    first = module.job
    assert target_of(first) == TargetRef(module.__name__, "job")
    assert target_of(first) == TargetRef(module.__name__, "job")  # remembered
    exec("def job(n):\n    return -n\n", module.__dict__)  # the module now names another one
    with pytest.raises(InvalidJobTarget, match="does not name this function"):
        target_of(first)
    assert target_of(module.job) == TargetRef(module.__name__, "job")


def _plain(a, b): ...
def _defaults(a, b=1, c=2): ...
def _star(a, *rest): ...
def _positional_only(a, /, b=0): ...
def _keyword_default(a, *, k=1): ...
def _keyword_required(a, *, k): ...
def _nothing(): ...


@pytest.mark.parametrize(
    "fn",
    [_plain, _defaults, _star, _positional_only, _keyword_default, _keyword_required, _nothing],
)
@pytest.mark.parametrize("count", range(5))
def test_positional_calls_are_refused_exactly_when_the_signature_refuses_them(
    fn: Any, count: int
) -> None:
    """The count-only check of positional calls agrees with binding the signature."""
    import inspect

    from ratchet.domain.errors import InvalidJobArguments
    from ratchet.targets import check_arguments

    args = tuple(range(count))
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        with pytest.raises(InvalidJobArguments):
            check_arguments(fn, TargetRef("m", fn.__name__), args, {})
    else:
        check_arguments(fn, TargetRef("m", fn.__name__), args, {})
