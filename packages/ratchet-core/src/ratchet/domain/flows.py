"""The rows of a flow about to be stored: jobs with their links, branch conditions, a batch.

Built by the engine (``ratchet.engine.workflows``, ``ratchet.engine.batches``) and handed to
:class:`~ratchet.ports.WorkflowStore` as values.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from datetime import timedelta

from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import NewJob
from ratchet.domain.workflow import JobType, WorkflowCondition


@dataclass(frozen=True)
class FlowJob:
    """A job of a flow about to be inserted: a :class:`NewJob` plus its links.

    ``job.status`` must be WAITING when ``waiting_for`` or ``signal_key`` is set, and for a
    batch parent.
    """

    job: NewJob
    job_type: JobType = JobType.SINGLE
    batch_id: uuid.UUID | None = None
    chain_id: uuid.UUID | None = None
    depends_on: uuid.UUID | None = None
    waiting_for: uuid.UUID | None = None
    has_dependents: bool = False
    on_success: str | None = None
    on_failure: str | None = None
    signal_key: str | None = None
    signal_wait: timedelta | None = None


@dataclass(frozen=True)
class BranchSpec:
    """A workflow condition row to insert: ``child`` runs when ``condition`` holds."""

    parent: uuid.UUID
    child: uuid.UUID
    condition: WorkflowCondition
    definition_order: int
    first_match: bool = False
    description: str | None = None


@dataclass(frozen=True)
class BatchSpec:
    """A batch row to insert (``sealed`` False for a streaming batch still reading)."""

    batch_id: uuid.UUID
    name: str
    total: int
    sealed: bool = True
    progress_hook: str | None = None


def waiting(job: NewJob) -> NewJob:
    """``job`` created WAITING."""
    return dc_replace(job, status=JobStatus.WAITING)
