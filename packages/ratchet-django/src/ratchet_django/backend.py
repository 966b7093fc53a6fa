"""``RatchetBackend``: a Django Tasks backend that stores every task as a Ratchet job.

``TASKS = {"default": {"BACKEND": "ratchet_django.backend.RatchetBackend"}}``. A task enqueued
inside ``transaction.atomic()`` is written in that transaction; a Ratchet worker
(``manage.py ratchet_worker``) runs it, and ``TaskResult.refresh()`` / ``get_result()`` read
its status, result and errors back from the job.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from ratchet import JobStatus
from ratchet.domain.model import JobRecord
from ratchet.serialization import decode_payload, decode_result
from ratchet_django import jobs
from ratchet_django.compat import (
    BaseTaskBackend,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from ratchet_django.mapping import STATUS_NAMES, ratchet_priority
from ratchet_django.runner import load_task, run_task

#: ``OPTIONS`` keys of a backend and what they set on every job.
OPTION_KEYS = frozenset({"MAX_RETRIES", "TIMEOUT", "DATABASE"})


class RatchetBackend(BaseTaskBackend):
    """Stores tasks as Ratchet jobs: durable, retried with fencing, prioritised with aging."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        from django.core.exceptions import ImproperlyConfigured

        unknown = sorted(set(self.options) - OPTION_KEYS)
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {unknown}; known: "
                f"{sorted(OPTION_KEYS)}"
            )
        self.max_retries = int(self.options.get("MAX_RETRIES", 0))
        timeout = self.options.get("TIMEOUT")
        self.timeout = timedelta(seconds=float(timeout)) if timeout is not None else None
        self.database: str | None = self.options.get("DATABASE")

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Store the task as a job in Django's transaction; return its READY result."""
        self.validate_task(task)
        app = jobs.get_app()
        args = list(args)
        kwargs = dict(kwargs)
        call = (task.module_path, args, kwargs, self.alias)
        if task.run_after is not None:
            builder = app.schedule(task.run_after, run_task, *call)
        else:
            builder = app.enqueue(run_task, *call)
        builder = (
            builder.with_priority(ratchet_priority(task.priority))
            .with_tags(f"queue:{task.queue_name}", "django-task")
            .with_param("django_task", task.module_path[:200])
            .with_param("queue", task.queue_name)
            .with_max_retries(self.max_retries)
        )
        if self.timeout is not None:
            builder = builder.with_timeout(self.timeout)
        handle = jobs.submit(builder, using=self.database)
        now = timezone.now()
        return TaskResult(
            task=task,
            id=str(handle.id),
            status=TaskResultStatus.READY,
            enqueued_at=now,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result as its job stands now.

        :raises TaskResultDoesNotExist: no job of a Django task has this id.
        """
        try:
            job_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(f"{result_id!r} is not a task result id") from None
        app = jobs.get_app()
        record = app.get_job(job_id)
        if record is None or not record.target.endswith(":run_task"):
            raise TaskResultDoesNotExist(f"no task result {result_id}")
        return self._result(app, record)

    def _result(self, app: Any, record: JobRecord) -> TaskResult:
        (path, args, kwargs, _backend), _ = decode_payload(record.payload, app.enums)
        task = load_task(path, app)
        attempts = app.attempts(record.job_id)
        errors = [
            TaskError(
                exception_class_path=_class_path(a.error or ""),
                traceback=a.traceback or a.error or "",
            )
            for a in attempts
            if a.error
        ]
        if record.status is JobStatus.CANCELED and record.last_error and not errors:
            errors.append(TaskError(exception_class_path="", traceback=record.last_error))
        status = TaskResultStatus[STATUS_NAMES[record.status]]
        result = TaskResult(
            task=task,
            id=str(record.job_id),
            status=status,
            enqueued_at=record.created_at,
            started_at=attempts[0].started_at if attempts else None,
            last_attempted_at=attempts[-1].started_at if attempts else None,
            finished_at=record.terminated_at,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=[a.node_id for a in attempts],
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", decode_result(record.result, app.enums))
        return result


def _class_path(error: str) -> str:
    """The exception class path from Ratchet's ``module.Type: message`` error text."""
    head = error.split(":", 1)[0].strip()
    return head if "." in head else f"builtins.{head}"
