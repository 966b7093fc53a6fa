"""The job function behind every Django task Ratchet runs."""

from __future__ import annotations

from typing import Any

from django.db import close_old_connections
from django.utils.module_loading import import_string

from ratchet import Ratchet
from ratchet.engine.context import JobContext
from ratchet.targets import TargetRef
from ratchet_django.compat import Task


def load_task(path: str, app: Ratchet) -> Task:
    """The ``@task`` object at ``path`` (``module.function``), once ``app``'s class policy
    allowed its module: nothing is imported before that.

    :raises ClassPolicyViolation: the policy refuses the task's module.
    :raises LookupError: nothing, or something that is not a task, lives at ``path``.
    """
    module, _, name = path.rpartition(".")
    app.enforce_policy(TargetRef(module, name))
    try:
        found = import_string(path)
    except ImportError as exc:
        raise LookupError(f"no Django task at {path!r}: {exc}") from exc
    if not isinstance(found, Task):
        raise LookupError(f"{path!r} is {type(found).__name__}, not a Django task")
    return found


def run_task(path: str, args: list[Any], kwargs: dict[str, Any], backend: str) -> Any:
    """Run the Django task at ``path`` with ``args`` and ``kwargs``; return its JSON result.

    Django's stale connections are closed before and after, as around a request.
    """
    from ratchet_django.jobs import get_app

    task = load_task(path, get_app())
    close_old_connections()
    try:
        if task.takes_context:
            from ratchet_django.compat import TaskContext, task_backends

            result = task_backends[backend].get_result(str(JobContext.current().job_id))
            return task.call(TaskContext(task_result=result), *args, **kwargs)
        return task.call(*args, **kwargs)
    finally:
        close_old_connections()
