"""Job targets: what can be stored as ``module:qualname`` and what is refused, and why."""

from __future__ import annotations

import functools

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
