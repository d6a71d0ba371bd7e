"""The process's one connection to Ray, shared by every RayExecutor in it.

Ray allows one ``ray.init`` per process. The first :class:`RayExecutor`
that finds Ray not initialized calls it (joining ``address``, or starting a
local cluster when there is none) and *owns* the connection: the last
executor to close then calls ``ray.shutdown()``. If the application
initialized Ray itself, every executor uses that connection and none ever
shuts it down.

A connection can be lost under the executors (``ray.shutdown()`` called by
the application, from any thread): :func:`token` names the connection an
executor joined and :func:`alive` says whether it is still the process's
connection. Past that, no handle made on it (the board, tool actors) may be
used again: Ray's core worker aborts the whole process on a handle of a
connection that is gone, and any ``.remote()`` would quietly start a new
local cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from dsh_actors import InvalidValueError

__all__ = ["acquire", "alive", "board", "release", "token"]

_lock = threading.Lock()
_users = 0
_owned = False
_local = False
_board: Any = None
_board_token: str | None = None  # the connection the board was made on


def token() -> str | None:
    """The current connection's identity (its driver's worker id, new at
    every ``ray.init``), or None when Ray is not initialized."""
    import ray

    if not ray.is_initialized():
        return None
    try:
        return str(ray.get_runtime_context().get_worker_id())
    except Exception:  # noqa: BLE001 - shut down meanwhile
        return None


def alive(joined: str | None) -> bool:
    """Whether the connection named ``joined`` (a :func:`token`) is still
    this process's connection to Ray."""
    return joined is not None and token() == joined


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
        if _users and _board_token is not None and not alive(_board_token):
            _forget_lost()  # the executors' connection was lost: start afresh
        if ray.is_initialized():
            if _users == 0:
                _owned = _local = False
            if address is not None and "://" not in address and address != "auto":
                current = _gcs_address()
                if current is not None and current != address:
                    raise InvalidValueError(
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

    global _board_token
    with _lock:
        current = token()
        if _board is None or _board_token != current:  # (a board of a lost connection is never used)
            _board = ray.remote(SignalBoard).options(num_cpus=0, max_concurrency=100_000).remote()
            _board_token = current
        return _board


def _forget_lost() -> None:
    # Under _lock: the handles of a lost connection are dropped, never used.
    global _owned, _local, _board, _board_token
    _board = _board_token = None
    _owned = _local = False


def release() -> None:
    """One executor closed; the last one kills the board and shuts an
    owned connection down."""
    global _users, _owned, _local, _board
    import ray

    with _lock:
        _users = max(0, _users - 1)
        if _users:
            return
        if _board is not None and not alive(_board_token):
            _forget_lost()  # lost: nothing to kill, nothing to shut down
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
