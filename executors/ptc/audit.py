"""The worker's audit hook: defence in depth, not a security boundary.

Installed by the worker (:mod:`worker`) right before the program runs, after
its code was compiled. It refuses (``Blocked``, a ``PermissionError``;
``BlockedImport``, an ``ImportError``):

* sockets and the network clients (``socket.*``, ``http.client.*``,
  ``urllib.*``, ...);
* new processes and process control: ``subprocess.Popen``, ``os.system``,
  ``os.exec*``, ``os.spawn*``, ``os.posix_spawn*``, ``os.fork``,
  ``os.forkpty``, ``os.kill``/``killpg``, ``signal.pthread_kill``
  (``_posixsubprocess.fork_exec``, which raises no event, is disarmed);
* once armed, new code made by the program itself: ``compile``/``exec``/
  ``eval``, ``marshal.loads``, code objects and ``__code__`` swaps, unless
  the caller is standard library or site-packages code (so imports of the
  stdlib, ``dataclasses`` and ``namedtuple`` work) and the code comes from
  there too;
* imports of ``ctypes``, ``cffi``, ``_posixsubprocess``, sub-interpreters
  and the CPython test modules;
* ``resource.setrlimit``/``prlimit`` (root could lift the limits),
  ``sys.addaudithook``, ``os.chroot``;
* writes outside the working folder (the worker's cwd): ``open`` for
  writing, and removing, renaming, linking, chmod/chown, ``mkdir``,
  ``shutil`` copies and moves, ``sqlite3.connect``, ``os.chdir`` out of it;
  operations relative to a directory descriptor are refused.

CPython code that runs in the process can get around all of this (it can
reach objects the hook does not see); put the worker in a sandbox (see the
README) to run hostile code.

Standard library only: copied next to ``worker.py`` into a container.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any

__all__ = ["Blocked", "BlockedImport", "Guard", "PROGRAM", "disarm_process_spawning"]

PROGRAM = "<run_code>"
"""The filename of the program (in tracebacks, and refused as a source of new code)."""

_BLOCKED_IMPORTS = frozenset(
    {
        "ctypes",
        "_ctypes",
        "cffi",
        "_cffi_backend",
        "_posixsubprocess",
        "_xxsubinterpreters",
        "_xxinterpchannels",
        "_testcapi",
        "_testinternalcapi",
    }
)

_DENIED_EVENTS = frozenset(
    {
        "os.system",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "os.startfile",
        "os.chroot",
        "signal.pthread_kill",
        "resource.setrlimit",
        "resource.prlimit",
        "sys.addaudithook",
        "webbrowser.open",
        "cpython.PyInterpreterState_New",
    }
)
_DENIED_PREFIXES = (
    "socket.",
    "subprocess.",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "ctypes.",
    "http.client.",
    "urllib.",
    "ftplib.",
    "smtplib.",
    "poplib.",
    "imaplib.",
    "nntplib.",
    "telnetlib.",
)

# event -> (indices of path arguments that must stay in the workdir,
#           indices of dir_fd arguments that must be unset)
_PATH_EVENTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.link": ((1,), (2, 3)),
    "os.symlink": ((1,), (2,)),
    "os.truncate": ((0,), ()),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.utime": ((0,), (3,)),
    "os.chflags": ((0,), ()),
    "os.lchflags": ((0,), ()),
    "os.lchmod": ((0,), ()),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
    "os.mkfifo": ((0,), ()),
    "os.mknod": ((0,), ()),
    "os.chdir": ((0,), ()),
    "shutil.copyfile": ((1,), ()),
    "shutil.copymode": ((1,), ()),
    "shutil.copystat": ((1,), ()),
    "shutil.copytree": ((1,), ()),
    "shutil.move": ((0, 1), ()),
    "shutil.rmtree": ((0,), ()),
    "shutil.chown": ((0,), ()),
    "shutil.make_archive": ((0,), ()),
    "shutil.unpack_archive": ((1,), ()),
    "sqlite3.connect": ((0,), ()),
    "tempfile.mkstemp": ((0,), ()),
    "tempfile.mkdtemp": ((0,), ()),
}
_UNSET_DIR_FDS = (None, -1, -100)  # unset, or AT_FDCWD
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class Blocked(PermissionError):
    """An operation the run_code sandbox policy refuses."""


class BlockedImport(ImportError):
    """An import the run_code sandbox policy refuses."""


# Tracebacks name them without a module (``Blocked: ...``), as built-ins.
Blocked.__module__ = BlockedImport.__module__ = "builtins"


def _trusted_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(sorted(os.path.realpath(p) + os.sep for p in roots if p))


class Guard:
    """The audit hook (see the module docstring). Setting ``armed`` starts
    refusing code made after the program was compiled. Built at start-up
    (``sysconfig`` takes milliseconds), installed by the run."""

    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.realpath(workdir)
        self.trusted = _trusted_prefixes()
        self.armed = False

    def inside(self, path: object) -> bool:
        if isinstance(path, int):
            return False
        try:
            text = os.fsdecode(path)  # type: ignore[arg-type]
        except TypeError:
            return False
        if text == os.devnull:
            return True
        real = os.path.realpath(text)
        return real == self.workdir or real.startswith(self.workdir + os.sep)

    def trusted_file(self, filename: object) -> bool:
        if not isinstance(filename, str):
            return False
        if filename.startswith("<frozen "):
            return True
        return os.path.realpath(filename).startswith(self.trusted)

    def trusted_caller(self) -> bool:
        # Frame 0 is this method, 1 the hook, 2 the code that raised the event.
        frame = sys._getframe(2)
        return self.trusted_file(frame.f_code.co_filename)

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if event in _DENIED_EVENTS or event.startswith(_DENIED_PREFIXES):
            raise Blocked(f"run_code does not allow {event}")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and not isinstance(path, int) and not self.inside(path):
                raise Blocked(f"run_code does not allow writing {path!r} (outside its working folder)")
            return
        rule = _PATH_EVENTS.get(event)
        if rule is not None:
            paths, dir_fds = rule
            for i in dir_fds:
                if i < len(args) and args[i] not in _UNSET_DIR_FDS:
                    raise Blocked(f"run_code does not allow {event} relative to a directory descriptor")
            for i in paths:
                if i < len(args) and not self.inside(args[i]):
                    raise Blocked(f"run_code does not allow {event} on {args[i]!r} (outside its working folder)")
            return
        if event == "import":
            if args[0].partition(".")[0] in _BLOCKED_IMPORTS:
                raise BlockedImport(f"run_code does not allow importing {args[0]}")
            return
        if not self.armed:
            return
        if event == "compile":
            filename = args[1] if len(args) > 1 else None
            ok = self.trusted_caller() and (
                not isinstance(filename, str) or filename.startswith("<") or self.trusted_file(filename)
            )
            if not ok:
                raise Blocked("run_code does not allow compiling new code")
        elif event == "exec":
            code = args[0]
            filename = getattr(code, "co_filename", None)
            ok = self.trusted_caller() and (
                not isinstance(filename, str) or filename.startswith("<") or self.trusted_file(filename)
            )
            if not ok or filename == PROGRAM:
                raise Blocked("run_code does not allow exec of new code")
        elif event == "code.__new__" or event == "marshal.loads" or event == "marshal.load":
            if not self.trusted_caller():  # importlib loading a .pyc is trusted
                raise Blocked(f"run_code does not allow {event}")
        elif event == "object.__setattr__":
            if len(args) > 1 and args[1] == "__code__":
                raise Blocked("run_code does not allow replacing a function's code")


def disarm_process_spawning() -> None:
    """``_posixsubprocess.fork_exec`` raises no audit event: disarm it."""
    module = sys.modules.get("_posixsubprocess")
    if module is not None:

        def fork_exec(*_args: object, **_kwargs: object) -> Any:
            raise Blocked("run_code does not allow starting processes")

        try:
            module.fork_exec = fork_exec  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # pragma: no cover
            pass
