"""Who may do what to a job: the actions a :class:`~ratchet.ports.JobAuthorizationPolicy` is
asked about, the request it gets, and the permit-all default (docs/security.md).

A *principal* is the name of whoever acts (a user, a service account). The principal that
submitted a job is stored with it once (``caller_principal``) and never changes.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ratchet.domain.errors import InvalidPrincipal
from ratchet.domain.text import is_storable_text

if TYPE_CHECKING:
    from ratchet.domain.model import JobFilter

MAX_PRINCIPAL_LENGTH = 255
"""The ``caller_principal`` column's size."""


class JobAction(enum.StrEnum):
    """What a principal wants to do."""

    CREATE = "create"
    """Submit a job (every job of a batch or flow is asked about)."""
    EXECUTE = "execute"
    """Run a job on a worker (asked with the job's own caller principal)."""
    CANCEL = "cancel"
    """Cancel a job, or replace it (a replacement cancels the old job)."""
    PAUSE = "pause"
    RESUME = "resume"
    RETRY = "retry"
    """Retry a dead-lettered job."""
    DELIVER_SIGNAL = "deliver_signal"
    READ = "read"
    """Look one job up by id (listings are narrowed by ``filter_for_principal`` instead)."""


@dataclass(frozen=True)
class AuthorizationRequest:
    """One question to the policy.

    ``principal`` is who acts: the current principal of the caller, or for ``EXECUTE`` the
    principal that submitted the job. ``job_id`` is None for bulk actions (by tag, by filter)
    and for ``CREATE``; ``owner`` is the job's stored caller principal where the job is known.
    """

    action: JobAction
    principal: str | None
    job_id: uuid.UUID | None = None
    target: str | None = None
    """``module:qualname`` of the job's function, where known."""
    owner: str | None = None
    tag: str | None = None
    """The tag of a bulk cancel."""
    signal_key: str | None = None
    """The key of a signal delivered by key."""

    def subject(self) -> str:
        """What the request is about, for messages."""
        if self.job_id is not None:
            return f"job {self.job_id}" + (f" ({self.target})" if self.target else "")
        if self.signal_key is not None:
            return f"the jobs waiting on signal key {self.signal_key!r}"
        if self.tag is not None:
            return f"the jobs tagged {self.tag!r}"
        if self.target is not None:
            return f"a job of {self.target}"
        return "these jobs"


class PermitAll:
    """The default policy: every principal may do everything and see every job."""

    def authorize(self, request: AuthorizationRequest) -> bool:
        """Always True."""
        return True

    def filter_for_principal(self, job_filter: JobFilter, principal: str | None) -> JobFilter:
        """The filter unchanged."""
        return job_filter


class OwnerOnly:
    """A policy for multi-tenant apps: a principal sees and manages only the jobs it submitted.

    Principals in ``admins`` may do everything. Anonymous callers may do nothing that
    concerns a job of a principal. Execution is always allowed (the submitter was checked at
    submit).
    """

    def __init__(self, admins: frozenset[str] | set[str] | tuple[str, ...] = ()) -> None:
        self.admins = frozenset(admins)

    def authorize(self, request: AuthorizationRequest) -> bool:
        """True for admins, for execution and creation, and for the owner of a single job;
        bulk actions only for admins."""
        if request.principal in self.admins or request.action in (
            JobAction.EXECUTE,
            JobAction.CREATE,
        ):
            return True
        if request.job_id is None:
            return False
        return request.owner is not None and request.owner == request.principal

    def filter_for_principal(self, job_filter: JobFilter, principal: str | None) -> JobFilter:
        """Admins see everything; everybody else only jobs they submitted."""
        if principal in self.admins:
            return job_filter
        return replace(job_filter, caller_principal=principal or "")


def check_principal(principal: object) -> str | None:
    """``principal`` if it can be stored as a caller principal (None stays None).

    :raises InvalidPrincipal: not a string, empty, longer than 255 characters, or text no
        database can hold (NUL, lone surrogates).
    """
    if principal is None:
        return None
    if not isinstance(principal, str):
        raise InvalidPrincipal(f"a principal is a name (str), got {type(principal).__name__}")
    if not principal or len(principal) > MAX_PRINCIPAL_LENGTH or not is_storable_text(principal):
        raise InvalidPrincipal(
            f"principal {principal[:40]!r} cannot be stored: use 1 to {MAX_PRINCIPAL_LENGTH} "
            "characters without NUL or lone surrogates"
        )
    return principal
