"""How a remote call fails when the cause is Ray, not the policy pipeline.

Every class is a :class:`~dsh_actors.DshError`, so the call's failure
carries ``info`` with the class name and a code from the runtime's closed
vocabulary: ``TOOL_FAILED`` for the call's own failures (the body raised,
its worker died, its value was lost), ``EXECUTOR_UNAVAILABLE`` when the
cluster could not take the call at all. The class name (``info.name``) is
the precise cause; a retry policy can tell an infrastructure failure
(:class:`RayWorkerDiedError`, :class:`RayObjectLostError`) from the tool's
own (:class:`RemoteToolError`).
"""

from __future__ import annotations

from dsh_actors import DshError, ErrorCode

__all__ = [
    "RayExecutionError",
    "RayObjectLostError",
    "RayUnavailableError",
    "RayWorkerDiedError",
    "RemoteToolError",
]


class RayExecutionError(DshError):
    """A remote call failed because of Ray: ``ray <kind>: <detail>``.
    ``ray_error`` is the Ray exception's class name."""

    code = ErrorCode.TOOL_FAILED

    def __init__(self, kind: str, detail: str, *, ray_error: str | None = None) -> None:
        self.kind = kind
        self.detail = detail
        self.ray_error = ray_error
        super().__init__(f"ray {kind}: {detail}")


class RemoteToolError(DshError):
    """The body raised on the worker: ``<OriginalClass>: <message>``.
    ``class_name`` and ``detail`` are the original exception's class and
    message, ``remote_traceback`` its traceback on the worker (kept for
    logs; never model-facing)."""

    code = ErrorCode.TOOL_FAILED

    def __init__(self, class_name: str, detail: str, remote_traceback: str = "") -> None:
        self.class_name = class_name
        self.detail = detail
        self.remote_traceback = remote_traceback
        super().__init__(f"{class_name}: {detail}" if detail else class_name)


class RayWorkerDiedError(RayExecutionError):
    """The worker process (or the actor) running the call died: killed,
    out of memory, its node lost. The call is not retried (a tool body may
    not be idempotent) unless its options set ``max_retries``."""

    def __init__(self, detail: str, *, ray_error: str | None = None) -> None:
        super().__init__("worker died", detail, ray_error=ray_error)


class RayObjectLostError(RayExecutionError):
    """The call's result object was lost (its owner or node died, it was
    evicted and could not be reconstructed)."""

    def __init__(self, detail: str, *, ray_error: str | None = None) -> None:
        super().__init__("object lost", detail, ray_error=ray_error)


class RayUnavailableError(RayExecutionError):
    """The cluster could not take the call (the executor is closed, the
    connection is gone, the submission failed)."""

    code = ErrorCode.EXECUTOR_UNAVAILABLE

    def __init__(self, detail: str, *, ray_error: str | None = None) -> None:
        super().__init__("unavailable", detail, ray_error=ray_error)
