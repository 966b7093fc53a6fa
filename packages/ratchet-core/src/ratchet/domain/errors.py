"""Typed errors. Each message says what was wrong and what to do about it.

Errors that no retry can fix carry ``__ratchet_do_not_retry__`` (see :mod:`ratchet.domain.retry`):
a job failing with one goes straight to the dead-letter queue.
"""

from __future__ import annotations


class RatchetError(Exception):
    """Base class of every error Ratchet raises on purpose."""


class ConfigurationError(RatchetError):
    """The scheduler or worker was configured in a way that cannot work."""


class InvalidJobOptions(RatchetError, ValueError):
    """A job option is out of range or malformed."""


class InvalidJobTarget(RatchetError, ValueError):
    """The callable cannot be stored as a job target (lambda, closure, not importable...)."""

    __ratchet_do_not_retry__ = True


class InvalidJobArguments(InvalidJobTarget):
    """The arguments given at submit do not fit the target's signature (too many, missing, or an
    unknown keyword): the job would fail on every attempt, so it is refused at once."""


class UnknownJobTarget(InvalidJobTarget):
    """A stored ``module:qualname`` reference no longer resolves to a callable."""


class UnserializableArgument(RatchetError, TypeError):
    """A job argument is not one of the JSON-safe types Ratchet stores."""

    __ratchet_do_not_retry__ = True


class PayloadTooLargeError(RatchetError, ValueError):
    """The serialized arguments exceed the configured payload cap."""


class PayloadDecodeError(RatchetError, ValueError):
    """Stored JSON (a job's arguments, a result or a signal) no longer decodes: it is not valid
    JSON, or it names an enum class or member that no longer exists. Decoding again cannot
    succeed, so a job failing with it goes straight to the dead-letter queue."""

    __ratchet_do_not_retry__ = True


class ResultTooLargeError(RatchetError, ValueError):
    """A job's JSON result exceeds the configured result cap."""

    __ratchet_do_not_retry__ = True


class ClassPolicyViolation(RatchetError, PermissionError):
    """The class policy does not allow this job target."""

    __ratchet_do_not_retry__ = True


class MissingClassPolicy(ConfigurationError):
    """No class policy is configured, so every job would be refused."""


class SchemaNotReady(ConfigurationError):
    """The database has no Ratchet schema, or an older one than this version of Ratchet needs.

    The message names the database (password masked) and the command that fixes it.
    """


class UnknownStoreError(ConfigurationError):
    """No installed plugin provides a store for the URL scheme."""


class UnknownPluginError(ConfigurationError):
    """A coordinator or executor provider was asked for by a name nobody registered."""


class DuplicateIdempotencyKeyError(RatchetError):
    """Another job already holds this idempotency key (a racing insert)."""

    def __init__(self, key: str, holder: object | None = None) -> None:
        super().__init__(
            f"idempotency key {key!r} is already used" + (f" by job {holder}" if holder else "")
        )
        self.key = key
        self.holder = holder


class DuplicateBusinessKeyError(RatchetError):
    """A live job already holds this business key."""

    def __init__(self, key: str, holder: object | None = None) -> None:
        who = f" (held by live job {holder})" if holder else ""
        super().__init__(f"business key {key!r} is already held by a live job{who}")
        self.key = key
        self.holder = holder


class JobNotFound(RatchetError, LookupError):
    """No job with this id exists."""


class FencedOut(RatchetError):
    """This node no longer owns the job (another epoch or owner): the write was refused."""

    def __init__(self, job_id: object, epoch: int, node_id: str) -> None:
        super().__init__(
            f"job {job_id} epoch {epoch} is no longer owned by node {node_id} (taken over, "
            "canceled or ended; nothing was written): stop this run and do not retry the write "
            "(re-raise this error if a job catches it)"
        )
        self.job_id = job_id
        self.epoch = epoch
        self.node_id = node_id


class StoreUnavailable(RatchetError):
    """The database could not be reached; the operation may be retried later."""


class ConnectionLimitReached(StoreUnavailable):
    """The database (or PgBouncer) refused a new connection because its connection limit is
    reached, or this process's own pool is exhausted; the message names the setting to raise
    or the pool setting to lower (see docs/deployment.md). A worker backs off and retries, as
    for any :class:`StoreUnavailable`."""


class OutcomeNotStorable(RatchetError):
    """The store refused an attempt's outcome for a reason other than an outage; the job was
    failed with this error instead (its original outcome is in the message)."""

    __ratchet_do_not_retry__ = True


class JobTimeoutError(BaseException):
    """An attempt ran past its deadline and was interrupted (or recorded as timed out).

    Raised inside the job's thread by the watchdog (an asynchronous exception), or in place of the
    result of a task or child process that was stopped. It derives from :class:`BaseException`,
    like ``KeyboardInterrupt`` and ``asyncio.CancelledError``, so a job's ``except Exception``
    does not swallow it. A timed-out attempt is retried while retries remain, then dead-lettered.
    """

    DEFAULT_MESSAGE = "the attempt ran past its deadline and was interrupted"

    def __init__(self, *args: object) -> None:
        # A thread is interrupted with the bare class (the C API cannot raise an instance), so
        # it never stands without a message.
        super().__init__(*(args or (self.DEFAULT_MESSAGE,)))


# -- authorization, encryption, lifecycle hooks (docs/security.md, docs/hooks.md) ----------------
class NotAuthorized(RatchetError, PermissionError):
    """The job authorization policy refused an action to a principal.

    When a worker is refused the right to execute a job, the job is dead-lettered with this
    error (a retry would be refused again).
    """

    __ratchet_do_not_retry__ = True

    def __init__(self, action: str, principal: str | None, subject: str, reason: str = "") -> None:
        who = "the anonymous caller" if principal is None else f"principal {principal!r}"
        why = f": {reason}" if reason else ""
        super().__init__(f"{who} may not {action} {subject}{why}")
        self.action = action
        self.principal = principal
        self.subject = subject
        self.reason = reason


class InvalidPrincipal(RatchetError, ValueError):
    """A caller principal that cannot be stored (empty, too long, or not storable text)."""


class PayloadDecryptionError(RatchetError):
    """A stored encrypted payload or result could not be decrypted. A retry cannot help until
    an operator fixes the key or the row, so the job is dead-lettered with this message."""

    __ratchet_do_not_retry__ = True


class EncryptionKeyNotFound(PayloadDecryptionError, LookupError):
    """The envelope names a key id the key provider does not have (any more)."""

    def __init__(self, key_id: str, what: str = "payload") -> None:
        super().__init__(
            f"the stored {what} is encrypted with key {key_id!r}, which the key provider does not "
            "have: give the provider that key again (keep old keys until `ratchet keys report` "
            "shows no row on them), then retry the job"
        )
        self.key_id = key_id


class TamperedEnvelope(PayloadDecryptionError):
    """The envelope does not authenticate: its ciphertext, nonce or header was changed (or the
    key under that id is not the key it was sealed with)."""


class UnsupportedEnvelopeVersion(PayloadDecryptionError):
    """The envelope was written by a newer Ratchet (a higher envelope version) or is malformed."""


class EncryptionUnavailable(ConfigurationError):
    """Encryption was configured but the ``cryptography`` package is not installed."""


class LifecycleHookError(RatchetError):
    """A ``ratchet_worker_starting`` hook raised: the worker did not start."""
