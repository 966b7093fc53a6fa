"""The pure workflow values: the nine condition types, branch selection, batch progress."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ratchet.domain.errors import ClassPolicyViolation, InvalidJobOptions
from ratchet.domain.model import FlowWrite, OutcomeWrite
from ratchet.domain.workflow import (
    BatchContext,
    ConditionType,
    EffectKind,
    FlowEffect,
    FlowResolver,
    JobResult,
    SignalDecision,
    StoredCondition,
    WorkflowCondition,
    evaluate,
    select_branches,
    validate_signal_key,
)

PREDICATES: dict[str, Any] = {
    "m:big": lambda r: r.value > 10,
    "m:even": lambda v: v % 2 == 0,
    "m:half": lambda b: b.success_rate >= 0.5,
    "m:raises": lambda r: 1 / 0,
}
resolve = PREDICATES.__getitem__

OK = JobResult(uuid.uuid4(), True, 12)
BAD = JobResult(uuid.uuid4(), False, None, "RuntimeError: no")


def batch(completed: int, failed: int, total: int | None = None) -> BatchContext:
    return BatchContext(uuid.uuid4(), "b", total or completed + failed, completed, failed)


@pytest.mark.parametrize(
    ("condition", "result", "ctx", "expected"),
    [
        (WorkflowCondition.success(), OK, None, True),
        (WorkflowCondition.success(), BAD, None, False),
        (WorkflowCondition.failure(), BAD, None, True),
        (WorkflowCondition.failure(), OK, None, False),
        (WorkflowCondition(ConditionType.CUSTOM, "m:big"), OK, None, True),
        (WorkflowCondition(ConditionType.CUSTOM, "m:big"), JobResult(1, True, 3), None, False),
        (WorkflowCondition(ConditionType.RESULT_VALUE, "m:even"), OK, None, True),
        (WorkflowCondition(ConditionType.RESULT_VALUE, "m:even"), BAD, None, False),
        (WorkflowCondition.batch_success(), OK, batch(3, 0), True),
        (WorkflowCondition.batch_success(), OK, batch(3, 1), False),
        (WorkflowCondition.batch_failure(), OK, batch(3, 1), True),
        (WorkflowCondition.batch_failure(), OK, batch(3, 0), False),
        (WorkflowCondition.success_rate(0.75), OK, batch(3, 1), True),
        (WorkflowCondition.success_rate(0.76), OK, batch(3, 1), False),
        (WorkflowCondition.failure_count(2), OK, batch(3, 2), True),  # reached
        (WorkflowCondition.failure_count(2), OK, batch(3, 3), True),  # and beyond
        (WorkflowCondition.failure_count(2), OK, batch(3, 1), False),
        (WorkflowCondition.failure_count(0), OK, batch(3, 0), True),
        (WorkflowCondition(ConditionType.BATCH_CUSTOM, "m:half"), OK, batch(1, 1), True),
        (WorkflowCondition(ConditionType.BATCH_CUSTOM, "m:half"), OK, batch(1, 2), False),
        (WorkflowCondition.batch_success(), OK, None, False),  # batch conditions need a batch
    ],
)
def test_each_condition_type(
    condition: WorkflowCondition, result: JobResult, ctx: BatchContext | None, expected: bool
) -> None:
    assert evaluate(condition, result, ctx, resolve) is expected


def test_all_nine_types_are_covered() -> None:
    assert len(ConditionType) == 9


def stored(*conditions: WorkflowCondition, first_match: bool = False) -> list[StoredCondition]:
    return [StoredCondition(i, c, i, first_match) for i, c in enumerate(conditions)]


def test_fan_out_fires_every_match_first_match_only_the_first() -> None:
    conds = (
        WorkflowCondition.success(priority=5),
        WorkflowCondition(ConditionType.CUSTOM, "m:big"),
        WorkflowCondition.failure(),
        WorkflowCondition(ConditionType.RESULT_VALUE, "m:even"),
    )
    fire, skip = select_branches(stored(*conds), OK, None, resolve)
    assert [c.child_job_id for c in fire] == [1, 3, 0]
    assert [c.child_job_id for c in skip] == [2]
    fire, skip = select_branches(stored(*conds, first_match=True), OK, None, resolve)
    assert [c.child_job_id for c in fire] == [1]
    assert sorted(c.child_job_id for c in skip) == [0, 2, 3]


def test_a_raising_predicate_is_not_a_match() -> None:
    errors: list[Exception] = []
    fire, _ = select_branches(
        stored(WorkflowCondition(ConditionType.CUSTOM, "m:raises"), WorkflowCondition.success()),
        OK,
        None,
        resolve,
        lambda s, exc: errors.append(exc),
    )
    assert [c.child_job_id for c in fire] == [1]
    assert isinstance(errors[0], ZeroDivisionError)


def test_conditions_round_trip_their_stored_form() -> None:
    for c in (
        WorkflowCondition.success_rate(0.25, priority=3),
        WorkflowCondition.failure_count(4),
        WorkflowCondition(ConditionType.CUSTOM, "m:big", 1),
        WorkflowCondition.batch_failure(),
    ):
        assert WorkflowCondition.from_row(c.type.value, c.to_json(), c.priority) == c


@pytest.mark.parametrize(
    "build",
    [
        lambda: WorkflowCondition.success_rate(-0.1),
        lambda: WorkflowCondition.success_rate(float("nan")),
        lambda: WorkflowCondition.failure_count(-1),
        lambda: WorkflowCondition.failure_count(True),  # type: ignore[arg-type]
        lambda: WorkflowCondition(ConditionType.CUSTOM, None),
        lambda: WorkflowCondition(ConditionType.BATCH_CUSTOM, "no-colon"),
        lambda: WorkflowCondition.success(priority="1"),  # type: ignore[arg-type]
    ],
)
def test_bad_conditions_are_refused(build: Any) -> None:
    with pytest.raises(InvalidJobOptions):
        build()


def test_batch_context_progress() -> None:
    ctx = BatchContext(1, "b", total=10, completed=6, failed=2)
    assert (ctx.processed, ctx.percent_done, ctx.success_rate) == (8, 80.0, 0.75)
    assert not ctx.is_complete
    assert BatchContext(1, "b", 2, 1, 1).is_complete
    assert not BatchContext(1, "b", 2, 1, 1, sealed=False).is_complete
    assert BatchContext(1, "b", 0, 0, 0, sealed=False).percent_done == 0.0
    assert BatchContext(1, "b", 5, 0, 0).success_rate == 1.0


def test_job_result_timings() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    r = JobResult(1, True, None, None, start, start + timedelta(milliseconds=250))
    assert (r.execution_time_ms, r.is_success, r.is_failure) == (250, True, False)
    assert JobResult(1, False).execution_time_ms_or_zero == 0


def test_signal_decisions_and_keys() -> None:
    rejected = SignalDecision.rejected("no stock")
    assert rejected.is_rejected and rejected.rejection_reason == "no stock"
    assert SignalDecision.approved("fine").rejection_reason is None
    assert validate_signal_key("  order-1 ") == "order-1"
    for bad in ("", "   ", "x" * 256, "tab\there", "é"):
        with pytest.raises(InvalidJobOptions):
            validate_signal_key(bad)
    with pytest.raises(InvalidJobOptions):
        validate_signal_key(7)  # type: ignore[arg-type]


# -- what crosses the store port ------------------------------------------------------------------
def test_a_resolver_given_nothing_refuses_every_reference() -> None:
    refusing = FlowResolver()
    for resolve_one in (refusing.predicate, refusing.enum):
        with pytest.raises(ClassPolicyViolation, match=r"tests\.jobs:anything"):
            resolve_one("tests.jobs:anything")
    condition = WorkflowCondition(ConditionType.CUSTOM, "m:big")
    stored = StoredCondition(uuid.uuid4(), condition, 0)
    errors: list[Exception] = []
    fire, skip = select_branches(
        [stored], OK, None, refusing.predicate, lambda _, exc: errors.append(exc)
    )
    assert (fire, skip) == ([], [stored])
    assert [type(e) for e in errors] == [ClassPolicyViolation]


def test_write_results_are_values() -> None:
    job = uuid.uuid4()
    effect = FlowEffect(EffectKind.RELEASED, None, job, data={"count": 1})
    assert OutcomeWrite((job,), (effect,)) == OutcomeWrite((job,), (effect,))
    assert OutcomeWrite() == OutcomeWrite((), ())
    assert FlowWrite(False, (effect,)).value is False


def test_a_flow_write_has_no_truth_value() -> None:
    """``if store.cancel_job(...)`` (a bool before the effects came along) fails loudly instead
    of always holding."""
    with pytest.raises(TypeError, match=r"\.value"):
        bool(FlowWrite(False))
