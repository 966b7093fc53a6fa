"""The Django Tasks API: ``django.tasks`` (Django 6+) when present, else the ``django-tasks``
backport, which has the same names under ``django_tasks``."""

from __future__ import annotations

try:
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist

    SOURCE = "django.tasks"
except ImportError:  # Django before 6: the backport
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import (
        InvalidTaskError,
        TaskResultDoesNotExist,
    )

    SOURCE = "django_tasks"

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "SOURCE",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
]
