"""Worker processes: spawning, killing, and the warm pool.

A :class:`Worker` is one child process started ahead of its run, in its own
session (so its process group is its own) and its own temporary working
folder. It serves exactly one run; :meth:`Worker.kill` kills the whole
process group, reaps the child, closes the pipes and removes the folder.
Its stderr is a pipe the run reads (and counts as output).
The :class:`WorkerPool` keeps ``spares`` workers started so that a run does
not wait for an interpreter to start, and replaces each one it hands out.

A worker dies with its parent: it asks for ``PR_SET_PDEATHSIG`` (which
fires when the *thread* that started it exits, so the pool starts every
worker on its own ``dsh-ptc-spawn`` thread, which lives until the pool
closes) and watches its protocol pipe (see :mod:`.worker`). A working
folder is named after the process that made it (``dsh-ptc-<pid>.<start
time>-...``), so :func:`remove_stale_folders`, run when an executor is
bound, removes the folders of dead processes (a parent killed with
``SIGKILL`` cannot remove its own).

Threads: every method is thread-safe. ``acquire`` runs on the thread that
runs the program (a call actor's); ``close`` on whichever thread stops the
runtime or disposes of the executor.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Final, TypeVar

from loguru import logger

from dsh_actors import InvalidStateError

fcntl: Any
try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

__all__ = [
    "DEFAULT_COMMAND",
    "FOLDER_PREFIX",
    "MAX_FOLDER_ENTRIES",
    "Worker",
    "WorkerPool",
    "default_command",
    "exit_description",
    "folder_usage",
    "remove_stale_folders",
]

T = TypeVar("T")

WORKER_FILE: Final = Path(__file__).with_name("worker.py")

DEFAULT_COMMAND: Final = ("{python}", "-I", "{worker}")
"""The default worker command: ``{python}`` is this interpreter, ``{worker}``
the path of ``worker.py``, ``{workdir}`` (usable in any element) the run's
working folder on this machine."""

_REAP_SECONDS: Final = 10.0

FOLDER_PREFIX: Final = "dsh-ptc-"
"""Working folders are ``<tmp>/dsh-ptc-<pid>.<start time>-<random>``."""

MAX_FOLDER_ENTRIES: Final = 10_000
"""Most files and folders a working folder may hold."""

_FOLDER_NAME: Final = re.compile(re.escape(FOLDER_PREFIX) + r"([0-9]+)\.([0-9]+)-")
_STDERR_TAIL: Final = 8192
_STDERR_PIPE_BYTES: Final = 1 << 20  # Linux's default most for a user (fs.pipe-max-size)
_PF_EXITING: Final = 0x4  # Linux: a task's flag from the start of its exit (include/linux/sched.h)


def _start_time(pid: int) -> str | None:
    """A token that tells apart two processes that had the same pid: its
    start time (Linux ``/proc``), ``"0"`` elsewhere for a live process,
    None when ``pid`` is not running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode("ascii", "replace")
        return data[data.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        pass
    if os.path.isdir("/proc/self"):
        return None  # Linux: no /proc/<pid>, no process
    try:  # pragma: no cover - not Linux
        os.kill(pid, 0)
    except ProcessLookupError:  # pragma: no cover
        return None
    except PermissionError:  # pragma: no cover
        pass
    return "0"  # pragma: no cover


_OWN_PREFIX: Final = f"{FOLDER_PREFIX}{os.getpid()}.{_start_time(os.getpid()) or '0'}-"


def _own_prefix() -> str:
    pid = os.getpid()
    if _OWN_PREFIX.startswith(f"{FOLDER_PREFIX}{pid}."):
        return _OWN_PREFIX
    return f"{FOLDER_PREFIX}{pid}.{_start_time(pid) or '0'}-"  # pragma: no cover - a forked copy


def remove_stale_folders(directory: str | None = None) -> list[str]:
    """Remove the working folders, in ``directory`` (default: the temporary
    folder), that this user's dead processes left behind; return their
    paths. A folder whose process still runs is kept."""
    directory = tempfile.gettempdir() if directory is None else directory
    removed: list[str] = []
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    alive: dict[str, str | None] = {}
    for entry in entries:
        match = _FOLDER_NAME.match(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or (uid is not None and info.st_uid != uid):
            continue
        pid, started = match.group(1), match.group(2)
        if pid not in alive:
            alive[pid] = _start_time(int(pid))
        if alive[pid] is not None and alive[pid] in (started, "0"):
            continue  # its process still runs
        _remove_tree(entry.path)
        if not os.path.lexists(entry.path):
            removed.append(entry.path)
    if removed:
        logger.info("removed {} PTC working folder(s) left by dead processes", len(removed))
    return removed


def folder_usage(path: str, max_entries: int = MAX_FOLDER_ENTRIES) -> tuple[int, int]:
    """(bytes, entries) under ``path``: the sizes of its files (links not
    followed) and how many files and folders it holds, counting stops once
    past ``max_entries``. A folder the program made unreadable is given
    its permissions back first."""
    total = entries = 0
    todo = [path]
    while todo and entries <= max_entries:
        folder = todo.pop()
        try:
            listing = list(os.scandir(folder))
        except PermissionError:
            with contextlib.suppress(OSError):
                os.chmod(folder, 0o700)
            try:
                listing = list(os.scandir(folder))
            except OSError:
                continue
        except OSError:  # removed meanwhile
            continue
        for entry in listing:
            entries += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                todo.append(entry.path)
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size  # the apparent size: a sparse file counts in full
    return total, entries


def default_command() -> list[str]:
    return [sys.executable, "-I", str(WORKER_FILE)]


def _expand(command: Sequence[str], workdir: str) -> list[str]:
    return [
        part.replace("{python}", sys.executable).replace("{worker}", str(WORKER_FILE)).replace("{workdir}", workdir)
        for part in command
    ]


def _remove_tree(path: str) -> None:
    """Remove a working folder, even where the program took its permissions away."""

    def retry(function: Any, name: str, _exc: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o700)
            function(name)

    if sys.version_info >= (3, 12):  # pragma: no cover - onerror is deprecated there
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)
    if os.path.lexists(path):  # pragma: no cover - a file system that refuses
        logger.warning("could not remove the PTC working folder {}", path)


def exit_description(status: int) -> str:
    """``exit code 3`` or ``killed by signal 9 (SIGKILL)``."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-status} ({name})"
    return f"exit code {status}"


class Worker:
    """One worker process (see the module docstring)."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str]) -> None:
        self.workdir = tempfile.mkdtemp(prefix=_own_prefix())
        self._lock = threading.Lock()
        self._killed = False
        self.status: int | None = None
        self._stderr_tail = bytearray()
        self._stderr_open = True
        environment = dict(env)
        environment.setdefault("TMPDIR", self.workdir)
        environment.setdefault("HOME", self.workdir)
        try:
            self._proc = subprocess.Popen(
                _expand(command, self.workdir),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workdir,
                env=environment,
                start_new_session=True,  # its own session and process group
                close_fds=True,
                bufsize=0,
            )
        except BaseException:
            _remove_tree(self.workdir)
            raise
        self.pid = self._proc.pid
        assert self._proc.stdin is not None and self._proc.stdout is not None and self._proc.stderr is not None
        self.stdin_fd = self._proc.stdin.fileno()
        self.stdout_fd = self._proc.stdout.fileno()
        self.stderr_fd = self._proc.stderr.fileno()
        os.set_blocking(self.stdin_fd, False)
        os.set_blocking(self.stdout_fd, False)
        os.set_blocking(self.stderr_fd, False)
        # Nobody reads a spare's stderr until its run: room for what a
        # launcher (docker pulling an image) writes meanwhile.
        if fcntl is not None and sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):  # a lower fs.pipe-max-size: keep the default
                fcntl.fcntl(self.stderr_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _STDERR_PIPE_BYTES)

    def __repr__(self) -> str:
        state = "killed" if self._killed else "live"
        return f"<Worker pid={self.pid} {state}>"

    @property
    def killed(self) -> bool:
        return self._killed

    def exited(self) -> bool:
        """Whether the child has ended (it is not reaped: its process group
        stays valid for :meth:`kill`)."""
        if self._killed:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def running(self) -> bool | None:
        """Whether the child still runs: False once it has ended or is
        ending (Linux: exiting, it closes its files, pipes included, before
        it becomes a zombie: ``PF_EXITING`` in ``/proc/<pid>/stat`` tells);
        None where this cannot be told (no ``/proc``)."""
        if self.exited():
            return False
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read()
        except OSError:
            return None
        # pid (comm) state ppid pgrp session tty_nr tpgid flags ...; comm may hold ")".
        after = fields[fields.rfind(b")") + 2 :].split()
        if len(after) < 7 or not after[6].isdigit():
            return None
        return after[0] not in (b"Z", b"X", b"x") and not int(after[6]) & _PF_EXITING

    def terminate(self) -> None:
        """Kill the process group without reaping or closing anything
        (another thread owns the worker and will :meth:`kill` it)."""
        with self._lock:
            if self._killed:
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def kill(self) -> int | None:
        """Kill the process group, reap the child, close everything, remove
        the working folder. Idempotent; returns the exit status (negative:
        the signal), or None when it could not be reaped in time."""
        with self._lock:
            if self._killed:
                return self.status
            self._killed = True
            # The child is not reaped yet, so its pid (= the group id) cannot
            # have been reused: this kills only what it started.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            try:
                self.status = self._proc.wait(timeout=_REAP_SECONDS)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck kernel
                logger.error("PTC worker {} did not exit after SIGKILL", self.pid)
                self.status = None
            self.read_stderr()  # what the dead worker left in the pipe, for stderr_tail()
            for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            _remove_tree(self.workdir)
            return self.status

    def read_stderr(self) -> int:
        """Read what the worker's stderr pipe holds now (without waiting),
        keeping its tail; the number of bytes read, or -1 at its end (the
        worker closed it or exited). Its Python-level stderr is captured
        output; this is what was written to fd 2 itself (``os.write(2,
        ...)``, C code, the interpreter's fatal errors)."""
        read = 0
        while self._stderr_open:
            try:
                chunk = os.read(self.stderr_fd, 1 << 16)
            except BlockingIOError:
                return read
            except OSError:
                chunk = b""
            if not chunk:
                self._stderr_open = False
                break
            read += len(chunk)
            self._stderr_tail += chunk
            if len(self._stderr_tail) > _STDERR_TAIL:
                del self._stderr_tail[: len(self._stderr_tail) - _STDERR_TAIL]
        return read if read else -1

    def stderr_tail(self, limit: int = 2000) -> str:
        """The last ``limit`` bytes the worker wrote to its fd 2 (see
        :meth:`read_stderr`)."""
        return bytes(self._stderr_tail[-limit:]).decode("utf-8", "replace").strip()

    def close_stderr(self) -> None:
        """Nothing left to do: :meth:`kill` closes the stderr pipe."""


class WorkerPool:
    """Keeps ``spares`` workers started; hands each out once."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], spares: int) -> None:
        self._command = tuple(command)
        self._env = dict(env)
        self._spares = spares
        self._lock = threading.Lock()
        self._idle: deque[Worker] = deque()
        self._busy: set[Worker] = set()  # handed out, not yet discarded
        self._closed = False
        self._starting = 0
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._spawner: threading.Thread | None = None

    def _on_spawner(self, function: Callable[[], T]) -> T:
        """Run ``function`` on the pool's spawner thread and wait for it:
        a worker's parent-death signal fires when the thread that started
        it exits, so every worker is started on this one thread."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise InvalidStateError("the PTC executor is closed")
            if self._spawner is None:
                self._spawner = threading.Thread(target=self._serve, name="dsh-ptc-spawn", daemon=True)
                self._spawner.start()
            self._requests.put((function, future))
        return future.result()

    def _serve(self) -> None:
        while True:
            request = self._requests.get()
            if request is None:
                return
            function, future = request
            if not future.set_running_or_notify_cancel():  # pragma: no cover - never cancelled
                continue
            try:
                future.set_result(function())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)

    def _spawn(self) -> Worker:
        command, env = self._command, self._env
        return self._on_spawner(lambda: Worker(command, env))

    def fill_later(self) -> None:
        """:meth:`fill` on the spawner thread, without waiting for it (a
        run that used a spare replaces it off its critical path)."""
        command, env = self._command, self._env
        with self._lock:
            if self._closed:
                return
            if self._spawner is None:
                self._spawner = threading.Thread(target=self._serve, name="dsh-ptc-spawn", daemon=True)
                self._spawner.start()
            self._requests.put((lambda: self.fill(lambda: Worker(command, env)), Future()))

    def fill(self, spawn: Callable[[], Worker] | None = None) -> None:
        """Start workers until ``spares`` are idle (or starting). A worker
        that cannot be started is logged; the next run will say why.
        (``spawn``: how, when this runs on the spawner thread already.)"""
        while True:
            with self._lock:
                if self._closed or len(self._idle) + self._starting >= self._spares:
                    return
                self._starting += 1
            try:
                worker = self._spawn() if spawn is None else spawn()
            except BaseException as exc:  # noqa: BLE001 - reported by the run that needs one
                with self._lock:
                    self._starting -= 1
                    closed = self._is_closed()
                if not closed:
                    logger.opt(exception=exc).warning("could not start a PTC spare worker")
                return
            with self._lock:
                self._starting -= 1
                closed = self._is_closed()  # again: close() may have run meanwhile
                if not closed:
                    self._idle.append(worker)
            if closed:
                self.discard(worker)
                return

    def acquire(self) -> Worker:
        """A started worker for one run: a spare if one is alive, a new
        one otherwise. The caller then calls :meth:`fill` (off its critical
        path) to replace it. Raises ``OSError`` when no worker can be
        started, ``RuntimeError`` once closed."""
        while True:
            with self._lock:
                if self._closed:
                    raise InvalidStateError("the PTC executor is closed")
                worker = self._idle.popleft() if self._idle else None
            if worker is None:
                worker = self._spawn()
            elif worker.exited():
                self.discard(worker)  # a dead spare: try the next one
                continue
            with self._lock:
                closed = self._is_closed()  # again: close() may have run meanwhile
                if not closed:
                    self._busy.add(worker)
            if closed:
                self.discard(worker)
                raise InvalidStateError("the PTC executor is closed")
            return worker

    def discard(self, worker: Worker) -> None:
        """Kill ``worker`` (its whole group), reap it and forget it. Called
        by the worker's owner: the run that acquired it, or the pool for an
        idle one."""
        worker.kill()
        worker.close_stderr()
        with self._lock:
            self._busy.discard(worker)

    def close(self) -> None:
        """Kill every idle worker and the process groups of running ones
        (their runs reap them), and start no more. Idempotent."""
        with self._lock:
            self._closed = True
            idle = list(self._idle)
            self._idle.clear()
            busy = list(self._busy)
            spawner, self._spawner = self._spawner, None
            if spawner is not None:
                self._requests.put(None)  # after every request already queued
        for worker in idle:
            self.discard(worker)
        for worker in busy:
            worker.terminate()
        if spawner is not None and spawner is not threading.current_thread():
            spawner.join()

    @property
    def closed(self) -> bool:
        return self._closed

    def _is_closed(self) -> bool:
        return self._closed

    def pids(self) -> list[int]:
        """Pids of the workers not yet discarded (idle or running)."""
        with self._lock:
            return sorted(w.pid for w in (*self._idle, *self._busy))
