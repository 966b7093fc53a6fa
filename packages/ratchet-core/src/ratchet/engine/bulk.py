"""Many calls of one function as jobs: what ``app.enqueue_many(fn, calls, options)`` stores.

A :class:`~ratchet.engine.builder.JobBuilder` carries every option a job can have, and a
``submit_many`` of builders pays for that once per job: the target and the class policy
checked, the caller authorized, the options copied, the id handed out under a lock. A bulk
submission of one function with one set of options does all of that once here; each job then
costs only what is its own: its arguments checked and encoded, and its id.

Each job gets its own id, and its id as its idempotency key (the default of a builder): the jobs
never collide with each other or with another submission. Options that name a single job (an
idempotency or business key, flows) are a builder's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ratchet.domain.errors import (
    InvalidJobArguments,
    PayloadTooLargeError,
    UnserializableArgument,
)
from ratchet.domain.model import NewJob
from ratchet.domain.options import JobOptions
from ratchet.engine.builder import check_delay, wakes_workers
from ratchet.engine.security import current_principal
from ratchet.serialization import encode_payload
from ratchet.targets import check_arguments

if TYPE_CHECKING:
    from ratchet.engine.host import AppHost

Call = Sequence[Any] | Mapping[str, Any]
"""One job's arguments: a tuple or list of positional ones, or a mapping of keyword ones."""


def call_arguments(call: object, place: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The positional and keyword arguments of ``call`` (the ``place``-th of a bulk submission).

    :raises InvalidJobArguments: ``call`` is neither a tuple or list nor a mapping.
    """
    if isinstance(call, tuple):
        return call, {}
    if isinstance(call, list):
        return tuple(call), {}
    if isinstance(call, Mapping):
        return (), dict(call)
    raise InvalidJobArguments(
        f"call {place} of enqueue_many has type {type(call).__name__}; give each job's arguments as "
        "a tuple (positional), e.g. (42,), or a dict (keyword), e.g. {'user_id': 42}"
    )


class CallJobs:
    """Builds the :class:`~ratchet.domain.model.NewJob` of each call of ``fn`` in ``calls``,
    with ``options``, due ``delay`` after the submission (None: at once).

    The target, the class policy and the caller's permission to create jobs of it are checked
    when this is made; each call's arguments when its job is built.

    :raises InvalidJobTarget: ``fn`` cannot be stored.
    :raises ClassPolicyViolation: the policy refuses it.
    :raises NotAuthorized: the current principal may not create jobs of it.
    :raises InvalidJobOptions: ``delay`` is not a non-negative ``timedelta``.
    """

    def __init__(
        self,
        app: AppHost,
        fn: Callable[..., Any],
        calls: Sequence[Call],
        options: JobOptions,
        delay: timedelta | None,
    ) -> None:
        if delay is not None:
            check_delay(delay)
        self._app = app
        self._fn = fn
        self._ref = app.check_target(fn)
        self.target = str(self._ref)
        self.principal = current_principal()
        app.guard.create(self.target, self.principal)
        self.calls = calls
        self.options = options
        self._delay = delay
        self._params = MappingProxyType(dict(options.params))
        self._fitting: set[int] = set()
        """Counts of positional arguments (and no keyword ones) that ``fn`` accepts: such a
        call fits whatever the values are, so each count is checked once."""
        self.wants_wakeup = wakes_workers(options.immediate, options.priority, bool(delay))
        """Whether the jobs wake the workers once stored: the same for every job here."""

    def build(
        self, start: int, stop: int, now: datetime, trace_context: str | None
    ) -> list[NewJob]:
        """The jobs of ``calls[start:stop]``, submitted at ``now`` in the trace ``trace_context``.

        :raises InvalidJobArguments: a call does not fit ``fn``'s signature.
        :raises UnserializableArgument: an argument is not storable.
        :raises PayloadTooLargeError: a call's arguments are larger than the payload cap.
        """
        app, fn, ref, options = self._app, self._fn, self._ref, self.options
        seal, new_id = app.protection.seal_payload, app.new_id
        max_bytes, enums = app.config.max_payload_bytes, app.enums
        scheduled = now + self._delay if self._delay else now
        fitting = self._fitting
        jobs: list[NewJob] = []
        for place in range(start, stop):
            args, kwargs = call_arguments(self.calls[place], place)
            try:
                if kwargs or len(args) not in fitting:
                    check_arguments(fn, ref, args, kwargs)
                    if not kwargs:
                        fitting.add(len(args))
                payload = seal(encode_payload(args, kwargs, max_bytes, enums=enums))
            except (InvalidJobArguments, UnserializableArgument, PayloadTooLargeError) as exc:
                raise type(exc)(f"call {place} of enqueue_many: {exc}") from exc
            job_id = new_id()
            jobs.append(
                NewJob(
                    job_id,
                    self.target,
                    payload,
                    options.priority,
                    options.max_retries,
                    options.backoff,
                    options.backoff_delay,
                    options.timeout,
                    scheduled,
                    now,
                    str(job_id),
                    tags=options.tags,
                    params=self._params,
                    trace_context=trace_context,
                    caller_principal=self.principal,
                )
            )
        return jobs
