"""Programmatic tool calling: ``run_code`` programs that call tools through
the same pipeline, in a killable process (``docs/reference.md``, section
11; ``README.md`` here).

    from executors.ptc import PtcExecutor
    rt.tools.set_executor(PtcExecutor(timeout_ms=30000))

The names are imported lazily, so that ``python -m executors.ptc.worker``
(the child process) does not load the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .executor import PtcExecutor
    from .log import PtcDispatchLog

__all__ = ["PtcDispatchLog", "PtcExecutor"]


def __getattr__(name: str) -> Any:
    if name == "PtcExecutor":
        from .executor import PtcExecutor

        return PtcExecutor
    if name == "PtcDispatchLog":
        from .log import PtcDispatchLog

        return PtcDispatchLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
