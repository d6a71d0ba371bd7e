"""Worker processes: spawning, killing, and the warm pool.

A :class:`Worker` is one child process started ahead of its run, in its own
session (so its process group is its own) and its own temporary working
folder. It serves exactly one run; :meth:`Worker.kill` kills the whole
process group, reaps the child, closes the pipes and removes the folder.
The :class:`WorkerPool` keeps ``spares`` workers started so that a run does
not wait for an interpreter to start, and replaces each one it hands out.

Threads: every method is thread-safe. ``acquire`` runs on the thread that
runs the program (a call actor's); ``close`` on whichever thread stops the
runtime or disposes of the executor.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

from loguru import logger

__all__ = ["DEFAULT_COMMAND", "Worker", "WorkerPool", "default_command", "exit_description"]

WORKER_FILE: Final = Path(__file__).with_name("worker.py")

DEFAULT_COMMAND: Final = ("{python}", "-I", "{worker}")
"""The default worker command: ``{python}`` is this interpreter, ``{worker}``
the path of ``worker.py``, ``{workdir}`` (usable in any element) the run's
working folder on this machine."""

_REAP_SECONDS: Final = 10.0


def default_command() -> list[str]:
    return [sys.executable, "-I", str(WORKER_FILE)]


def _expand(command: Sequence[str], workdir: str) -> list[str]:
    return [
        part.replace("{python}", sys.executable)
        .replace("{worker}", str(WORKER_FILE))
        .replace("{workdir}", workdir)
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
        self.workdir = tempfile.mkdtemp(prefix="dsh-ptc-")
        self._lock = threading.Lock()
        self._killed = False
        self.status: int | None = None
        self._stderr: IO[bytes] = tempfile.TemporaryFile(prefix="dsh-ptc-stderr-")
        environment = dict(env)
        environment.setdefault("TMPDIR", self.workdir)
        environment.setdefault("HOME", self.workdir)
        try:
            self._proc = subprocess.Popen(
                _expand(command, self.workdir),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=self.workdir,
                env=environment,
                start_new_session=True,  # its own session and process group
                close_fds=True,
                bufsize=0,
            )
        except BaseException:
            self._stderr.close()
            _remove_tree(self.workdir)
            raise
        self.pid = self._proc.pid
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self.stdin_fd = self._proc.stdin.fileno()
        self.stdout_fd = self._proc.stdout.fileno()
        os.set_blocking(self.stdin_fd, False)
        os.set_blocking(self.stdout_fd, False)

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
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            _remove_tree(self.workdir)
            return self.status

    def stderr_tail(self, limit: int = 2000) -> str:
        """The last ``limit`` bytes the worker wrote to its stderr (its
        Python-level stderr is captured output; this is what the
        interpreter itself wrote, e.g. a fatal error)."""
        try:
            size = os.fstat(self._stderr.fileno()).st_size
            self._stderr.seek(max(0, size - limit))
            return self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def close_stderr(self) -> None:
        with contextlib.suppress(OSError):
            self._stderr.close()


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

    def _spawn(self) -> Worker:
        return Worker(self._command, self._env)

    def fill(self) -> None:
        """Start workers until ``spares`` are idle (or starting). A worker
        that cannot be started is logged; the next run will say why."""
        while True:
            with self._lock:
                if self._closed or len(self._idle) + self._starting >= self._spares:
                    return
                self._starting += 1
            try:
                worker = self._spawn()
            except BaseException as exc:  # noqa: BLE001 - reported by the run that needs one
                logger.opt(exception=exc).warning("could not start a PTC spare worker")
                with self._lock:
                    self._starting -= 1
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
                    raise RuntimeError("the PTC executor is closed")
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
                raise RuntimeError("the PTC executor is closed")
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
        for worker in idle:
            self.discard(worker)
        for worker in busy:
            worker.terminate()

    @property
    def closed(self) -> bool:
        return self._closed

    def _is_closed(self) -> bool:
        return self._closed

    def pids(self) -> list[int]:
        """Pids of the workers not yet discarded (idle or running)."""
        with self._lock:
            return sorted(w.pid for w in (*self._idle, *self._busy))
