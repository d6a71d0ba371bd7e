"""The process's one connection to Ray, shared by every RayExecutor in it.

Ray allows one ``ray.init`` per process. The first :class:`RayExecutor`
that finds Ray not initialized calls it (joining ``address``, or starting a
local cluster when there is none) and *owns* the connection: the last
executor to close then calls ``ray.shutdown()``. If the application
initialized Ray itself, every executor uses that connection and none ever
shuts it down.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["acquire", "board", "release"]

_lock = threading.Lock()
_users = 0
_owned = False
_local = False
_board: Any = None


def _gcs_address() -> str | None:
    import ray

    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - e.g. a Ray Client connection
        return None


def acquire(address: str | None, init_options: Mapping[str, Any]) -> tuple[bool, bool]:
    """Connect (or reuse the connection). Returns ``(owned, local)``: whether
    this process's executors made the connection (the last ``release``
    then calls ``ray.shutdown()``), and whether they started the cluster
    too (a local one, stopped by that shutdown)."""
    global _users, _owned, _local
    import ray

    with _lock:
        if ray.is_initialized():
            if _users == 0:
                _owned = _local = False
            if address is not None and "://" not in address and address != "auto":
                current = _gcs_address()
                if current is not None and current != address:
                    raise ValueError(
                        f"this process is already connected to the Ray cluster at {current}, "
                        f"not {address} (one connection per process)"
                    )
        else:
            kwargs: dict[str, Any] = dict(init_options)
            if address is not None:
                kwargs["address"] = address
            ray.init(**kwargs)
            _owned = True
            _local = address is None
        _users += 1
        return _owned, _local


def board() -> Any:
    """The process's :class:`~executors.ray.worker.SignalBoard` actor (one
    for every executor of the process: call keys name their executor),
    created on first use and killed when the last executor closes."""
    global _board
    import ray

    from .worker import SignalBoard

    with _lock:
        if _board is None:
            _board = ray.remote(SignalBoard).options(num_cpus=0, max_concurrency=100_000).remote()
        return _board


def release() -> None:
    """One executor closed; the last one kills the board and shuts an
    owned connection down."""
    global _users, _owned, _local, _board
    import ray

    with _lock:
        _users = max(0, _users - 1)
        if _users:
            return
        if _board is not None:
            try:
                ray.kill(_board)
            except Exception:  # noqa: BLE001 - already gone (or Ray is)
                pass
            _board = None
        if _owned:
            _owned = _local = False
            ray.shutdown()
