"""Built-in plugin: the ``processes`` executor provider (a hard kill at the deadline).

Each running job holds a slot thread in the worker and one child process from a pool of
long-lived children (``python -m ratchet.adapters.processes``, created on demand, reused). Nothing
is pickled, and the parent's ``__main__`` is never imported again: the parent sends the stored
target reference (``module:qualname``) and the JSON payload over a pipe; the child imports the
target itself (see :mod:`ratchet.targets`) with the parent's ``sys.path``, runs it under a
:class:`~ratchet.engine.context.JobContext`, and answers with a JSON result or a description of
its error. The class policy was already checked by the worker before the job is sent. The
child's stdout and stderr are the worker's.

At the deadline the child is terminated (SIGTERM), killed after ``kill_grace`` if it is still
alive, and a fresh child takes its place for the next job: even a job stuck in C code stops.
The cancellation request reaches the child as a message on its pipe, so
``throw_if_cancellation_requested`` works there as in a thread. If the worker goes away, its
children exit.

Limits: a bean method runs on an instance the child builds with no arguments (instances
registered with ``app.register_bean`` live in the parent only); results and errors cross as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, TypeVar

from ratchet import hookimpl
from ratchet.adapters.threads import InterruptiblePool
from ratchet.domain.errors import JobTimeoutError
from ratchet.domain.retry import is_do_not_retry
from ratchet.ports import AttemptControl, JobCall

if TYPE_CHECKING:
    from ratchet.engine.joblogger import JobLogBuffer
    from ratchet.registry import ExecutorRegistry

T = TypeVar("T")

log = logging.getLogger("ratchet.executor")


class RemoteJobError(Exception):
    """A job failed in a child process; ``description`` is ``module.Type: message`` there."""

    def __init__(self, description: str, remote_traceback: str | None = None) -> None:
        super().__init__(description)
        self.ratchet_description = description
        self.remote_traceback = remote_traceback


class RemotePermanentJobError(RemoteJobError):
    """A job failed in a child process with an error marked do-not-retry."""

    __ratchet_do_not_retry__ = True


class ChildProcessDied(RuntimeError):
    """The child process running a job exited without answering (crash, ``os._exit``...)."""


# ---------------------------------------------------------------------------------- the child
_beans: dict[type, Any] = {}


def _resolve(target: str) -> Callable[..., Any]:
    from ratchet.targets import TargetRef, owner_class, resolve_attribute

    ref = TargetRef.parse(target)
    if not ref.bean:
        fn: Callable[..., Any] = resolve_attribute(ref)
        return fn
    cls = owner_class(ref)
    if cls not in _beans:
        _beans[cls] = cls()
    method: Callable[..., Any] = getattr(_beans[cls], ref.qualname.rsplit(".", 1)[1])
    return method


def _execute(request: dict[str, Any], flag: threading.Event) -> dict[str, Any]:
    """Run one job request in this (child) process and describe how it ended."""
    from ratchet.domain.text import describe_error, describe_traceback
    from ratchet.engine.context import AttemptCancellation, JobContext, bound, stopped_on_request
    from ratchet.engine.joblogger import JobLogger
    from ratchet.serialization import decode_payload, encode_result, import_enum

    c = request["context"]
    deadline = datetime.fromisoformat(c["deadline"]) if c.get("deadline") else None
    cancellation = AttemptCancellation(deadline, flag=flag)
    lines = _child_log_buffer(c)
    ctx = JobContext(
        job_id=uuid.UUID(c["job_id"]),
        attempt=c["attempt"],
        epoch=c["epoch"],
        node_id=c["node_id"],
        scheduled_time=datetime.fromisoformat(c["scheduled_time"]),
        params=c["params"],
        tags=tuple(c["tags"]),
        cancellation=cancellation,
        caller_principal=c.get("caller_principal"),
        job_log=None if lines is None else JobLogger(lines, _utc_now),
    )
    with bound(ctx):
        try:
            fn = _resolve(request["target"])
            # The worker decoded this same text under its class policy before sending it.
            args, kwargs = decode_payload(request["payload"], import_enum)
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = asyncio.run(_await(value))
            reply: dict[str, Any] = {
                "ok": True,
                "result": encode_result(value, request["max_result_bytes"]),
            }
        except BaseException as exc:
            reply = {
                "ok": False,
                "error": describe_error(exc),
                "traceback": describe_traceback(exc),
                "do_not_retry": is_do_not_retry(exc),
                "stopped": stopped_on_request(exc, cancellation.token),
            }
    if lines is not None:
        reply["log"] = [
            [line.level.value, line.message, line.logged_at.isoformat()]
            for line in lines.close(_utc_now)
        ]
    return reply


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _child_log_buffer(context: dict[str, Any]) -> JobLogBuffer | None:
    """The job log buffer of a run in the child (None when the worker stores no job log): the
    lines go back to the worker with the reply."""
    from ratchet.domain.retention import JobLogLimits
    from ratchet.engine.joblogger import JobLogBuffer

    limits = context.get("log_limits")
    if limits is None:
        return None
    return JobLogBuffer(
        uuid.UUID(context["job_id"]), context["epoch"], context["attempt"], JobLogLimits(**limits)
    )


async def _await(value: Any) -> Any:
    return await value


def child_main(requests_fd: int, replies_fd: int) -> None:
    """Entry point of a child: run requests until the parent closes the pipe (then exit at once).

    A reader thread takes every message: ``run`` requests queue for the main thread, ``cancel``
    sets the flag of the run it names, end of file ends the process even mid-job (the worker that
    would record the result is gone; another node takes the job over once the watcher declares
    that node dead).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    requests, replies = (
        Connection(requests_fd, writable=False),
        Connection(replies_fd, readable=False),
    )
    runs: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    current: dict[str, Any] = {"run": None, "flag": threading.Event()}
    cancelled: set[int] = set()
    lock = threading.Lock()

    def read() -> None:
        while True:
            try:
                message = json.loads(requests.recv_bytes())
            except (EOFError, OSError):
                os._exit(0)
            if message["op"] == "init":
                sys.path[:] = message["sys_path"]
            elif message["op"] == "run":
                runs.put(message)
            elif message["op"] == "cancel":
                with lock:
                    cancelled.add(message["run"])  # it may not have started yet
                    if current["run"] == message["run"]:
                        current["flag"].set()

    threading.Thread(target=read, name="ratchet-child-reader", daemon=True).start()
    while True:
        request = runs.get()
        flag = threading.Event()
        with lock:
            current["run"], current["flag"] = request["run"], flag
            if request.get("cancelled") or request["run"] in cancelled:
                flag.set()
        reply = _execute(request, flag)
        with lock:
            current["run"] = None
            cancelled.difference_update([r for r in cancelled if r <= request["run"]])
        replies.send_bytes(json.dumps(reply).encode())


# --------------------------------------------------------------------------------- the parent
class _Child:
    """One child process and its two pipes."""

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ratchet.adapters.processes",
                    str(to_child_r),
                    str(from_child_w),
                ],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.requests = Connection(to_child_w, readable=False)
        self.replies = Connection(from_child_r, writable=False)
        self.write_lock = threading.Lock()
        self.send({"op": "init", "sys_path": list(sys.path)})

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message: dict[str, Any]) -> None:
        with self.write_lock:
            self.requests.send_bytes(json.dumps(message).encode())

    def stop(self, grace: float) -> None:
        """Terminate, then kill after ``grace`` seconds; always reaps the process."""
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                log.warning("job process %s ignored SIGTERM; killing it", self.pid)
                self.process.kill()
                self.process.wait(5)
        for conn in (self.requests, self.replies):
            with contextlib.suppress(OSError):
                conn.close()


class ProcessExecutorProvider:
    """Runs each attempt in a pooled child process; kills the child at the deadline."""

    name = "processes"
    kill_grace = 2.0
    """Seconds between SIGTERM and SIGKILL of a child that overran its deadline."""

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self._pool = InterruptiblePool(max_workers, "ratchet-proc-slot")
        self._lock = threading.Lock()
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        self._runs = 0
        self.killed = 0
        """Children stopped at a deadline (a metric)."""

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        return self._pool.submit(fn)

    def _checkout(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.alive():
                    self._busy.add(child)
                    return child
                child.stop(0)
        child = _Child()
        with self._lock:
            self._busy.add(child)
        return child

    def _checkin(self, child: _Child, *, healthy: bool) -> None:
        with self._lock:
            self._busy.discard(child)
            if healthy:
                self._idle.append(child)
        if not healthy:
            child.stop(self.kill_grace)

    def run(self, call: JobCall, control: AttemptControl) -> Any:
        ctx = call.context
        deadline = control.deadline
        with self._lock:
            self._runs += 1
            run_id = self._runs
        request = {
            "op": "run",
            "run": run_id,
            "target": call.target,
            "payload": call.payload,
            "max_result_bytes": call.max_result_bytes,
            "context": {
                "job_id": str(ctx.job_id),
                "attempt": ctx.attempt,
                "epoch": ctx.epoch,
                "node_id": ctx.node_id,
                "scheduled_time": ctx.scheduled_time.isoformat(),
                "params": dict(ctx.params),
                "tags": list(ctx.tags),
                "caller_principal": ctx.caller_principal,
                "deadline": deadline.isoformat() if deadline is not None else None,
                "log_limits": None if ctx.job_log is None else ctx.job_log.limits_document(),
            },
        }
        lock = threading.Lock()
        running: dict[str, Any] = {"child": None, "interrupted": False}

        def interrupt() -> None:
            with lock:
                running["interrupted"] = True
                target: _Child | None = running["child"]
                if target is not None:
                    target.process.terminate()

        def on_request() -> None:
            with lock:
                target: _Child | None = running["child"]
            if target is not None:
                with contextlib.suppress(OSError):  # a gone child ends the run anyway
                    target.send({"op": "cancel", "run": run_id})

        with control.watch(interrupt=interrupt, on_request=on_request):
            child = self._checkout()
            with lock:
                stopped = running["interrupted"]
                if not stopped:
                    running["child"] = child
            if stopped:
                self._checkin(child, healthy=True)
                raise JobTimeoutError("the job reached its deadline before its process started")
            raw: bytes | None
            try:
                request["cancelled"] = control.is_cancellation_requested()
                child.send(request)
                raw = child.replies.recv_bytes()
            except (EOFError, OSError):
                raw = None
            finally:
                with lock:
                    running["child"] = None
                    stopped = running["interrupted"]
        if raw is None or stopped:
            self._checkin(child, healthy=False)
            if stopped:
                with self._lock:
                    self.killed += 1
                raise JobTimeoutError(f"the job's process {child.pid} was stopped at its deadline")
            raise ChildProcessDied(
                f"the job's process {child.pid} exited with code {child.process.returncode} "
                "without answering"
            )
        self._checkin(child, healthy=True)
        reply = json.loads(raw)
        if ctx.job_log is not None and reply.get("log"):
            ctx.job_log.add_lines(reply["log"])
        if reply["ok"]:
            from ratchet.serialization import decode_result, import_enum

            # The job's own return value, encoded by the child a moment ago (not stored data);
            # the worker stores it again, and readers decode it under their class policy.
            return decode_result(reply["result"], import_enum)
        if reply["stopped"]:
            from ratchet.engine.context import CancellationRequestedException

            raise CancellationRequestedException.for_context(
                f"stopped at a safe point in process {child.pid}: {reply['error']}", ctx
            )
        error = RemotePermanentJobError if reply["do_not_retry"] else RemoteJobError
        raise error(reply["error"], reply.get("traceback"))

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait)
        with self._lock:
            children = [*self._idle, *self._busy]
            self._idle.clear()
            self._busy.clear()
        for child in children:
            child.stop(self.kill_grace if wait else 0.1)


@hookimpl
def ratchet_register_executor_providers(registry: ExecutorRegistry) -> None:
    registry.add("processes", ProcessExecutorProvider)


if __name__ == "__main__":  # a child: python -m ratchet.adapters.processes READ_FD WRITE_FD
    child_main(int(sys.argv[1]), int(sys.argv[2]))
