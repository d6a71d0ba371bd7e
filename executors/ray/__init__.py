"""Run chosen tool bodies on a Ray cluster (README.md here).

    from executors.ray import RayExecutor
    rt.tools.set_executor(RayExecutor(remote={"grade"}))     # or per scope

Scheduling, policies, validation and the session log stay in the driver;
only the bodies of tools placed on Ray run there, as Ray tasks or on Ray
actors. Needs the ``ray`` extra (``pip install 'dsh-actors[ray]'``). The
names are imported lazily: ``import executors.ray`` does not import Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .errors import (
        RayExecutionError,
        RayObjectLostError,
        RayUnavailableError,
        RayWorkerDiedError,
        RemoteToolError,
    )
    from .executor import RayExecutor
    from .options import ActorMethod, RayActor, RayTask
    from .worker import RemoteContext, RemoteSignal

__all__ = [
    "ActorMethod",
    "RayActor",
    "RayExecutionError",
    "RayExecutor",
    "RayObjectLostError",
    "RayTask",
    "RayUnavailableError",
    "RayWorkerDiedError",
    "RemoteContext",
    "RemoteSignal",
    "RemoteToolError",
]

_WHERE = {
    "RayExecutor": "executor",
    "ActorMethod": "options",
    "RayActor": "options",
    "RayTask": "options",
    "RayExecutionError": "errors",
    "RayObjectLostError": "errors",
    "RayUnavailableError": "errors",
    "RayWorkerDiedError": "errors",
    "RemoteToolError": "errors",
    "RemoteContext": "worker",
    "RemoteSignal": "worker",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
