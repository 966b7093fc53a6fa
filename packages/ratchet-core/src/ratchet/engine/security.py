"""The app's security parts (docs/security.md): the caller principal of this context, the
authorization guard, and the protection of stored payloads (encryption at rest, masking on
every read surface)."""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ratchet.domain.authorization import AuthorizationRequest, JobAction, PermitAll, check_principal
from ratchet.domain.envelope import envelope_key_id, is_envelope
from ratchet.domain.errors import NotAuthorized, PayloadDecryptionError
from ratchet.domain.masking import MaskingPolicy
from ratchet.events import JobEvent

if TYPE_CHECKING:
    import uuid

    from ratchet.domain.model import JobFilter, JobRecord
    from ratchet.encryption import PayloadCipher
    from ratchet.ports import JobAuthorizationPolicy

_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ratchet_caller_principal", default=None
)


def current_principal() -> str | None:
    """The principal set by the innermost :func:`as_principal` of this context (None: none)."""
    return _principal.get()


@contextmanager
def as_principal(principal: str | None) -> Iterator[str | None]:
    """Act as ``principal`` inside the block: jobs submitted there store it as their caller
    principal, and operator actions there are authorized for it. Nests; restored on exit;
    follows ``contextvars`` (each thread and asyncio task has its own).

    :raises InvalidPrincipal: the name cannot be stored.
    """
    token = _principal.set(check_principal(principal))
    try:
        yield principal
    finally:
        _principal.reset(token)


class Guard:
    """Asks the authorization policy and turns a refusal into :class:`NotAuthorized`."""

    def __init__(self, policy: JobAuthorizationPolicy) -> None:
        self.policy = policy
        self.permits_all = type(policy) is PermitAll
        """The default policy: callers may skip building requests that cannot be refused."""

    def require(self, request: AuthorizationRequest) -> None:
        """:raises NotAuthorized: the policy refuses the request."""
        if not self.policy.authorize(request):
            raise NotAuthorized(request.action.value, request.principal, request.subject())

    def allows(self, request: AuthorizationRequest) -> bool:
        return bool(self.policy.authorize(request))

    def create(self, target: str, principal: str | None) -> None:
        """:raises NotAuthorized: ``principal`` may not submit a job of ``target``."""
        if not self.permits_all:
            self.require(AuthorizationRequest(JobAction.CREATE, principal, target=target))

    def job_action(self, action: JobAction, job_id: uuid.UUID, record: JobRecord | None) -> None:
        """:raises NotAuthorized: the current principal may not do ``action`` to the job
        (``record``: the job as stored, None when it does not exist)."""
        self.require(
            AuthorizationRequest(
                action,
                current_principal(),
                job_id=job_id,
                target=None if record is None else record.target,
                owner=None if record is None else record.caller_principal,
            )
        )

    def narrow(self, job_filter: JobFilter) -> JobFilter:
        """The filter a listing by the current principal runs with."""
        if self.permits_all:
            return job_filter
        return self.policy.filter_for_principal(job_filter, current_principal())


class Protection:
    """Seals stored arguments and results when a cipher is configured, opens them for the
    worker and for readers, and masks sensitive fields in what readers see."""

    def __init__(self, cipher: PayloadCipher | None, masking: MaskingPolicy) -> None:
        self.cipher = cipher
        self.masking = masking

    def seal_payload(self, text: str) -> str:
        """Arguments' JSON as stored (sealed when a cipher is configured)."""
        return text if self.cipher is None else self.cipher.seal(text, "payload")

    def seal_result(self, text: str | None) -> str | None:
        if text is None or self.cipher is None:
            return text
        return self.cipher.seal(text, "result")

    def open(self, text: str, purpose: str) -> str:
        """The plain JSON of stored text.

        :raises PayloadDecryptionError: an envelope without a cipher, a missing key, a tampered
            envelope, or a newer envelope version.
        """
        if not is_envelope(text):
            return text
        if self.cipher is None:
            raise PayloadDecryptionError(
                f"the stored {purpose} is encrypted (key {envelope_key_id(text)!r}) but this app "
                "has no key provider: configure the keys (RATCHET_ENCRYPTION_KEYS or a "
                "ratchet_key_provider plugin)"
            )
        return self.cipher.open(text, purpose)

    def open_result(self, text: str | None) -> str | None:
        return None if text is None else self.open(text, "result")

    def _shown(self, text: str | None, purpose: str) -> str | None:
        """Stored text as a reader sees it: opened where possible, masked. An envelope that
        cannot be opened here shows as a JSON note naming its key."""
        if text is None:
            return None
        if is_envelope(text):
            try:
                text = self.open(text, purpose)
            except PayloadDecryptionError as exc:
                return _note(text, exc)
        return self.masking.mask_json_text(text)

    def reveal(self, record: JobRecord) -> JobRecord:
        """The record as readers see it: arguments and result decrypted where the keys are at
        hand, then masked; parameters masked."""
        payload = self._shown(record.payload, "payload")
        result = self._shown(record.result, "result")
        params = self.masking.mask(record.params)
        if payload is record.payload and result is record.result and params is record.params:
            return record
        return dataclasses.replace(record, payload=payload or "", result=result, params=params)

    def mask_event(self, event: JobEvent) -> JobEvent:
        """The event with sensitive fields of its ``data`` masked."""
        data = self.masking.mask(event.data)
        return event if data is event.data else dataclasses.replace(event, data=data)


def _note(text: str, exc: PayloadDecryptionError) -> str:
    import json

    return json.dumps(
        {"encrypted": True, "key_id": envelope_key_id(text), "error": str(exc)},
        separators=(",", ":"),
    )
