"""The process's one connection to Ray, shared by every RayExecutor in it.

Ray allows one ``ray.init`` per process. The first :class:`RayExecutor`
that finds Ray not initialized calls it (joining ``address``, or starting a
local cluster when there is none) and *owns* the connection: the last
executor to close then calls ``ray.shutdown()``. If the application
initialized Ray itself, every executor uses that connection and none ever
shuts it down.

A connection can be lost under the executors: ``ray.shutdown()`` called by
the application, from any thread, or its cluster gone (its GCS killed, its
head node lost: Ray's connection then stays "initialized" and a call on it
waits for ever). :func:`token` names the connection an executor joined,
:func:`watch` (while calls wait on it) asks its GCS whether it still
answers, and :func:`alive` says whether it is still the process's
connection and its GCS has not stopped answering. Past that, no handle
made on it (the board, tool actors) may be used again: Ray's core worker
aborts the whole process on a handle of a connection that is gone, any
``.remote()`` would quietly start a new local cluster, and one that needs
a GCS that is gone blocks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from dsh_actors import InvalidValueError

from .errors import RayUnavailableError

__all__ = ["GCS_LOST_AFTER_S", "RECONNECT_TIMEOUT_S", "acquire", "alive", "board", "release", "token", "watch"]

GCS_LOST_AFTER_S: Final = 3.0
"""A GCS that has answered no probe for this long is gone: its connection
is lost (a slow answer under load is not; a GCS restarted by Ray's fault
tolerance that takes longer is)."""
RECONNECT_TIMEOUT_S: Final = 7 * 24 * 3600
"""``gcs_rpc_server_reconnect_timeout_s`` for a local cluster an executor
starts: Ray ends the driver process ("Failed to connect to GCS within 60
seconds ... The program will terminate") once its GCS has been gone that
long (60 s by default). A local cluster's GCS never comes back, and the
executor fails its calls itself: the driver lives on. (Ray multiplies it by
1000 in 32 bits: it stays below 2**31 / 1000.)"""
_PROBE_TIMEOUT_S = 1.0
_PROBE_EVERY_S = 0.5

_lock = threading.Lock()
_users = 0
_owned = False
_local = False
_owned_token: str | None = None  # the connection these executors made (ray.init), shut down by the last release
_board: Any = None
_board_token: str | None = None  # the connection the board was made on
_gcs_lost: str | None = None  # a connection whose GCS stopped answering: lost for good
_gcs_silent: tuple[str, float] | None = None  # (a connection, since when its GCS has answered no probe)
_probe_after = 0.0  # (monotonic) no probe before then: one is in flight, or one answered just now
_quieted = False  # Ray's printing of cluster errors turned off by _quiet


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
    this process's connection to Ray, its GCS not found gone by
    :func:`watch`."""
    return joined is not None and joined != _gcs_lost and token() == joined


def watch(joined: str | None) -> None:
    """Ask the GCS of the connection ``joined`` whether it still answers
    (called while a call waits on it, on a running event loop; at most one
    probe in flight in the process, one every half second): once it has
    answered none for :data:`GCS_LOST_AFTER_S` seconds, :func:`alive` says
    False for good. Ray's own client gives a GCS that is gone about a
    second before it says so. A Ray Client connection (``ray://``) has no
    GCS client here: only a ``ray.shutdown()`` is noticed there."""
    global _probe_after
    now = time.monotonic()
    with _lock:
        if joined is None or joined == _gcs_lost or now < _probe_after:
            return
        # (A probe whose loop closes under it never answers: another one then.)
        _probe_after = now + _PROBE_TIMEOUT_S + _PROBE_EVERY_S
    try:
        import ray._private.worker

        worker: Any = ray._private.worker.global_worker
        probe = worker.gcs_client.async_check_alive([], _PROBE_TIMEOUT_S)
        future = (
            asyncio.wrap_future(probe) if isinstance(probe, concurrent.futures.Future) else asyncio.ensure_future(probe)
        )
    except Exception:  # noqa: BLE001 - no GCS client (Ray Client), or shut down meanwhile
        return
    future.add_done_callback(lambda done: _probed(joined, now, done))


def _probed(joined: str, started: float, probe: Any) -> None:
    global _gcs_lost, _gcs_silent, _probe_after
    from ray.exceptions import RpcError

    error = None if probe.cancelled() else probe.exception()
    now = time.monotonic()
    with _lock:
        _probe_after = now + _PROBE_EVERY_S
        if probe.cancelled():
            return
        if error is None:
            _gcs_silent = None
            return
        if not isinstance(error, RpcError):
            return  # (not an answer about the GCS)
        if _gcs_silent is None or _gcs_silent[0] != joined:
            _gcs_silent = (joined, started)
        if now - _gcs_silent[1] >= GCS_LOST_AFTER_S:
            _gcs_lost = joined


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
    global _users, _owned, _local, _owned_token
    import ray

    with _lock:
        current = token()
        if current is not None and current == _gcs_lost:
            raise RayUnavailableError(
                "this process's Ray connection has lost its cluster (its GCS stopped answering): "
                + (
                    "close the RayExecutors that use it (the last one shuts it down), then make a new RayExecutor"
                    if _owned and current == _owned_token
                    else "call ray.shutdown(), then make a new RayExecutor"
                )
            )
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
            _owned_token = token()
            if not kwargs.get("log_to_driver", True):
                _quiet(True)
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
    # Under _lock: the handles of a lost (or closed) connection are dropped, never used.
    global _owned, _local, _board, _board_token
    _board = _board_token = None
    _owned = _local = False
    _quiet(False)


def _quiet(on: bool) -> None:
    """Whether Ray's driver prints what its cluster reports (under _lock).

    Ray's driver prints the errors its cluster publishes, such as a worker
    that died ("(raylet) A worker died or was killed ..."), whatever
    ``log_to_driver`` says. On a connection the executors make with
    ``log_to_driver=False`` they stay in Ray's logs like the workers'
    output: off through ``ray._private.worker._worker_logs_enabled``, the
    switch Ray's own debugger turns off while it holds the terminal (the
    only one Ray has), and on again once that connection is closed or
    lost. (A Ray without it prints them.)"""
    global _quieted
    import ray._private.worker

    if on == _quieted or not hasattr(ray._private.worker, "_worker_logs_enabled"):
        return
    ray._private.worker._worker_logs_enabled = not on
    _quieted = on


def release() -> None:
    """One executor closed; the last one kills the board and shuts an
    owned connection down (one whose cluster is lost too: that stops what
    is left of a local cluster and disconnects, in a few seconds)."""
    global _users, _owned_token
    import ray

    with _lock:
        _users = max(0, _users - 1)
        if _users:
            return
        board, made_on = _board, _board_token
        owned = _owned_token if _owned else None
        try:
            if board is not None and alive(made_on):  # (a handle of a lost connection is never used)
                try:
                    ray.kill(board)
                except Exception:  # noqa: BLE001 - already gone (or Ray is)
                    pass
            if owned is not None and token() == owned:  # (not the application's own, made since)
                ray.shutdown()
        finally:
            _forget_lost()
            _owned_token = None
