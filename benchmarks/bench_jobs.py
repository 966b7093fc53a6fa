"""Job functions for the benchmarks, and the outcomes a worker writes for them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratchet.domain.model import ClaimedJob, Outcome


def noop(i: int) -> None:
    return None


def succeeded(
    jobs: Iterable[ClaimedJob], now: datetime, result: str | None = "null"
) -> list[Outcome]:
    """The SUCCEEDED outcomes of claimed ``jobs`` at ``now``, built as the worker builds them:
    ``flow_effects`` from the claim, so that plain jobs skip the store's workflow look-up (a
    store-alone loop that left it out measured a look-up the worker never makes)."""
    from ratchet.domain.model import Outcome, OutcomeKind

    return [
        Outcome(
            c.job_id,
            c.epoch,
            c.attempt,
            OutcomeKind.SUCCEEDED,
            now,
            now,
            result=result,
            flow_effects=c.flow_effects,
        )
        for c in jobs
    ]
