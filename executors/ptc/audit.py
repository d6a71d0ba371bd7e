"""The worker's audit hook: defence in depth, not a security boundary.

Installed by the worker (:mod:`worker`) right before the program runs, after
its code was compiled. It refuses (``Blocked``, a ``PermissionError``;
``BlockedImport``, an ``ImportError``):

* sockets and the network clients (``socket.*``, ``http.client.*``,
  ``urllib.*``, ...); a new event loop's self-pipe is a socket pair, so
  ``asyncio.run``/``asyncio.new_event_loop`` are refused too, with a
  message that says to await on the worker's loop instead (:data:`NEW_LOOP`);
* new processes and process control: ``subprocess.Popen``, ``os.system``,
  ``os.exec*``, ``os.spawn*``, ``os.posix_spawn*``, ``os.fork``,
  ``os.forkpty``, ``os.kill``/``killpg``, ``signal.pthread_kill``
  (``_posixsubprocess.fork_exec``, which raises no event, is disarmed);
* reaching another process by other doors: ``os.pidfd_open`` and
  ``signal.pidfd_send_signal`` (a signal to a process descriptor, the
  runtime's own included), ``os.setpriority``, ``os.sched_setaffinity``,
  ``os.sched_setscheduler``, ``os.sched_setparam`` (they take any pid:
  the runtime's could be starved), ``os.setns``/``os.unshare`` where
  Python has them. CPython raises no audit event for these: the worker
  replaces them (in ``os``/``posix`` and ``signal``/``_signal``) with
  functions that raise the one this hook refuses, and keeps no reference
  to the originals; importing ``posix`` or ``_signal`` anew (to get fresh
  originals) is refused. ``prctl``, ``ptrace`` and ``process_vm_*`` have
  no Python binding outside ``ctypes``/``cffi``, refused below;
* once armed, new code made by the program itself: ``compile``/``exec``/
  ``eval``, ``marshal.loads``, code objects and ``__code__`` swaps, unless
  the caller is standard library or site-packages code (so imports of the
  stdlib, ``dataclasses`` and ``namedtuple`` work) and the code comes from
  there too;
* imports of ``ctypes``, ``cffi``, ``_posixsubprocess``, sub-interpreters
  and the CPython test modules;
* ``resource.setrlimit``/``prlimit`` (root could lift the limits),
  ``sys.addaudithook``, ``os.chroot``;
* writes outside the working folder (the worker's cwd): ``open``/``os.open``
  for writing, and removing, renaming, linking (a hard link to a file
  outside the folder too), chmod/chown, ``mkdir``, ``shutil`` copies and
  moves, ``sqlite3.connect``, ``os.mkfifo``/``os.mknod`` (through the
  worker's own, which raise the audit event CPython's do not), ``os.chdir``
  out of it; a written path that
  climbs back up (``a/../b``); symbolic links whose target could lead out
  (an absolute target outside the folder, or any ``..``);
  ``os.open`` relative to a directory descriptor for writing, and any
  relative ``os.open`` that does not go through the worker's ``os.open``
  (which lets this hook see its ``dir_fd``: the ``open`` audit event does
  not carry it); every other operation relative to a directory descriptor
  that raises an audit event (``os.remove``, ``os.rename``, ...);
* reading other processes' ``/proc/<pid>`` entries (the parent's
  ``environ``, ``mem``, ``cmdline``, open files, ...), however the path
  gets there (``/proc/self/../<pid>``, ``/proc/self/root/proc/<pid>``, a
  symbolic link, a directory descriptor): every path opened or listed is
  resolved step by step and refused if a step is under ``/proc/<pid>`` of
  a process other than the worker; the worker's own entries
  (``/proc/self``, ``/proc/thread-self``) stay readable;
* ``gc.get_objects``/``get_referrers``/``get_referents`` (they reach any
  object, this hook's included).

What it does not cover: operations that raise no audit event
(``os.stat``, ``os.readlink``, ``os.access`` and ``os.listdir`` by file
descriptor, on any path; reading another process's scheduling facts,
``os.getpriority``, ``os.sched_getaffinity`` and the like); reading any
file the user can read; a fresh ``posix`` made with
``_imp.create_builtin``; and
CPython code that runs in the process can get around all of this (it can
reach and change the objects the hook relies on: frames, modules). Put
the worker in a sandbox (see the README) to run hostile code.

Standard library only: copied next to ``worker.py`` into a container.
"""

from __future__ import annotations

import asyncio.selector_events
import os
import re
import stat
import sys
import sysconfig
from typing import Any

__all__ = ["Blocked", "BlockedImport", "Guard", "NEW_LOOP", "PROGRAM", "disarm_process_spawning", "resolution"]

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
        "os.pidfd_open",
        "signal.pidfd_send_signal",
        "os.setpriority",
        "os.sched_setaffinity",
        "os.sched_setscheduler",
        "os.sched_setparam",
        "os.setns",
        "os.unshare",
        "resource.setrlimit",
        "resource.prlimit",
        "sys.addaudithook",
        "webbrowser.open",
        "cpython.PyInterpreterState_New",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
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
    "os.link": ((0, 1), (2, 3)),  # the source too: a hard link to an outside file writes it
    "os.symlink": ((1,), (2,)),  # and its target (see Guard.check_symlink)
    "os.truncate": ((0,), ()),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.utime": ((0,), (3,)),
    "os.chflags": ((0,), ()),
    "os.lchflags": ((0,), ()),
    "os.lchmod": ((0,), ()),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
    "os.mkfifo": ((0,), (2,)),  # raised by the worker's own os.mkfifo (CPython raises none)
    "os.mknod": ((0,), (3,)),  # and os.mknod
    "os.chdir": ((0,), ()),
    "shutil.copyfile": ((1,), ()),
    "shutil.copymode": ((1,), ()),
    "shutil.copystat": ((1,), ()),
    "shutil.copytree": ((1,), ()),
    "shutil.move": ((0, 1), ()),
    "shutil.rmtree": ((0,), (1,)),
    "shutil.chown": ((0,), ()),
    "shutil.make_archive": ((0,), ()),
    "shutil.unpack_archive": ((1,), ()),
    "sqlite3.connect": ((0,), ()),
    "tempfile.mkstemp": ((0,), ()),
    "tempfile.mkdtemp": ((0,), ()),
}
_READ_EVENTS = frozenset({"os.listdir", "os.scandir"})  # (path,): checked like reads
_UNAUDITED_PROCESS_CALLS: dict[tuple[str, str], tuple[str, ...]] = {
    ("os", "posix"): (
        "pidfd_open",
        "setpriority",
        "sched_setaffinity",
        "sched_setscheduler",
        "sched_setparam",
        "setns",
        "unshare",
    ),
    ("signal", "_signal"): ("pidfd_send_signal",),
}
"""Calls that reach another process but raise no audit event, by the module
pair that holds them: :meth:`Guard.install` replaces each with one that
raises ``<first module>.<name>``, an event in ``_DENIED_EVENTS``."""
_REPLACED_BUILTINS = frozenset({"posix", "_signal"})
"""Built-in modules whose functions the worker replaces: importing one anew
would give back the originals."""
_UNSET_DIR_FDS = (None, -1, -100)  # unset, or AT_FDCWD
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PROC_ENTRY = re.compile(r"/proc/([0-9]+)(?:/|$)")
_MAX_LINKS = 40

_SELF_PIPE_CODE: Any = getattr(
    getattr(asyncio.selector_events.BaseSelectorEventLoop, "_make_self_pipe", None), "__code__", None
)
"""The code of asyncio's ``_make_self_pipe``: a new event loop makes its
self-pipe there, a socket pair."""
NEW_LOOP = (
    "run_code does not allow starting an event loop (asyncio.run, asyncio.new_event_loop): "
    "a program runs on the worker's event loop already: await coroutines directly "
    "(await tools.x(), asyncio.gather(...)) instead of starting a loop"
)

_posix_open = os.open
"""The real ``os.open`` (``posix.open``), captured at import, before the
worker's own ``os.open`` replaces it."""


def _os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
    # The hook reads this frame's ``dir_fd`` (the ``open`` event does not
    # carry it): keep the call exactly this one.
    return _posix_open(path, flags, mode, dir_fd=dir_fd)


_os_open.__name__ = _os_open.__qualname__ = "open"
_os_open.__doc__ = _posix_open.__doc__
_OS_OPEN_CODE = _os_open.__code__

_posix_mkfifo = getattr(os, "mkfifo", None)
_posix_mknod = getattr(os, "mknod", None)


def _os_mkfifo(path: Any, mode: int = 0o666, *, dir_fd: int | None = None) -> None:
    # CPython raises no audit event for mkfifo: raise the one the hook checks.
    path = os.fspath(path)
    sys.audit("os.mkfifo", path, mode, dir_fd)
    assert _posix_mkfifo is not None
    _posix_mkfifo(path, mode, dir_fd=dir_fd)


def _os_mknod(path: Any, mode: int = 0o600, device: int = 0, *, dir_fd: int | None = None) -> None:
    path = os.fspath(path)
    sys.audit("os.mknod", path, mode, device, dir_fd)
    assert _posix_mknod is not None
    _posix_mknod(path, mode, device, dir_fd=dir_fd)


_os_mkfifo.__name__ = _os_mkfifo.__qualname__ = "mkfifo"
_os_mknod.__name__ = _os_mknod.__qualname__ = "mknod"


def _refused_call(event: str, name: str) -> Any:
    """A stand-in for a call CPython raises no audit event for: it raises
    ``event``, which the hook refuses. It holds no reference to the
    original, so a program cannot dig it out."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        sys.audit(event, *args)
        raise Blocked(f"run_code does not allow {event}")  # no hook installed: refused all the same

    refused.__name__ = refused.__qualname__ = name
    return refused


class Blocked(PermissionError):
    """An operation the run_code sandbox policy refuses."""


class BlockedImport(ImportError):
    """An import the run_code sandbox policy refuses."""


# Tracebacks name them without a module (``Blocked: ...``), as built-ins.
Blocked.__module__ = BlockedImport.__module__ = "builtins"


def _text(path: object) -> str | None:
    """``path`` as text (the audit events carry str or bytes), or None."""
    if isinstance(path, (str, bytes)):
        return os.fsdecode(path)
    return None


def _magic_link(link: str, target: str) -> bool:
    """A ``/proc`` link that names an object, not a path (``pipe:[12]``)."""
    return link.startswith("/proc/") and not target.startswith("/") and ":" in target


def resolution(path: str) -> list[str]:
    """Every absolute path the resolution of ``path`` passes through: each
    component in turn, symbolic links followed as the kernel does (like
    ``os.path.realpath``, but recording each step); the last is the
    resolved path. Raises ``Blocked`` on a link loop."""
    steps: list[str] = []
    links = 0

    def walk(base: str, rest: str) -> str:
        nonlocal links
        if rest.startswith("/"):
            base = "/"
        for name in rest.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                base = os.path.dirname(base)
                steps.append(base)
                continue
            new = base + name if base.endswith("/") else f"{base}/{name}"
            steps.append(new)
            try:
                is_link = stat.S_ISLNK(os.lstat(new).st_mode)
                target = os.readlink(new) if is_link else ""
            except OSError:  # missing (it may be created), or unreadable
                is_link = False
            if not is_link or _magic_link(new, target):
                base = new
                continue
            links += 1
            if links > _MAX_LINKS:
                raise Blocked(f"run_code does not allow {path!r} (too many levels of symbolic links)")
            base = walk(os.path.dirname(new), target)
        return base

    start = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    steps.append(walk("/", start))
    return steps


def _climbs(text: str) -> bool:
    """Whether ``text`` goes down and back up (``a/../b``): with a symbolic
    link swapped for a folder between the check and the call, such a path
    can land outside the folder."""
    down = False
    for name in text.split("/"):
        if name == "..":
            if down:
                return True
        elif name not in ("", "."):
            down = True
    return False


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
        self.pid = os.getpid()
        self.real_open = _posix_open
        self.open_code = _OS_OPEN_CODE

    def install(self) -> None:
        """Replace ``os.open`` with the worker's own (so relative opens show
        their ``dir_fd``), ``os.mkfifo``/``os.mknod`` with ones that raise
        an audit event (CPython's raise none) and the calls that reach
        another process without one with ones that raise the event this
        hook refuses, make ``shutil.rmtree`` use paths rather than
        directory descriptors, disarm process spawning, add the hook and
        arm it: right before the program runs."""
        import posix
        import shutil

        os.open = posix.open = _os_open
        if _posix_mkfifo is not None:
            os.mkfifo = posix.mkfifo = _os_mkfifo
        if _posix_mknod is not None:
            os.mknod = posix.mknod = _os_mknod
        for module_names, names in _UNAUDITED_PROCESS_CALLS.items():
            modules = [sys.modules[m] for m in module_names if m in sys.modules]
            for name in names:
                if any(hasattr(module, name) for module in modules):
                    refused = _refused_call(f"{module_names[0]}.{name}", name)
                    for module in modules:
                        setattr(module, name, refused)
        shutil._use_fd_functions = False  # type: ignore[attr-defined]
        disarm_process_spawning()
        sys.addaudithook(self)
        self.armed = True

    def inside(self, path: object) -> bool:
        """Whether ``path`` is a path in the working folder (and does not
        climb back up)."""
        text = _text(path)
        if text is None:
            return False
        if text == os.devnull:
            return True
        if _climbs(text):
            return False
        real = os.path.realpath(text)
        return real == self.workdir or real.startswith(self.workdir + os.sep)

    def own_process(self, pid: str) -> bool:
        """Whether ``/proc/<pid>`` is this worker's (itself or one of its threads)."""
        return pid == str(self.pid) or os.path.isdir(f"/proc/{self.pid}/task/{pid}")

    def check_readable(self, text: str, shown: object) -> None:
        """Refuse ``text`` if resolving it passes through another process's
        ``/proc/<pid>``."""
        for step in resolution(text):
            match = _PROC_ENTRY.match(step)
            if match is not None and not self.own_process(match.group(1)):
                raise Blocked(f"run_code does not allow reading {shown!r} (another process's /proc entry)")

    def check_symlink(self, target: object) -> None:
        """A link in the folder must not lead out of it, now or after a rename:
        its target is relative and only goes down, or absolute in the folder."""
        text = _text(target)
        if text is None or ".." in text.split("/"):
            raise Blocked(f"run_code does not allow a symbolic link to {target!r}")
        if text.startswith("/") and not (text.startswith(self.workdir + os.sep) and self.inside(text)):
            raise Blocked(f"run_code does not allow a symbolic link to {target!r} (outside its working folder)")

    def os_open_dir_fd(self) -> Any:
        """The ``dir_fd`` of the ``os.open`` that raised this ``open`` event
        (with a relative path), read from the worker's ``os.open`` frame;
        refused when the call did not come through it."""
        # Frame 0 is this method, 1 check_open, 2 the hook, 3 the code that
        # called posix.open.
        frame = sys._getframe(3)
        if frame.f_code is not self.open_code or frame.f_globals.get("_posix_open") is not self.real_open:
            raise Blocked("run_code does not allow opening a relative path with the original posix.open")
        return frame.f_locals.get("dir_fd")

    def fd_folder(self, fd: object) -> str:
        """The folder a directory descriptor is open on."""
        if type(fd) is not int:
            raise Blocked(f"run_code does not allow dir_fd={fd!r}")
        try:
            folder = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            raise Blocked("run_code does not allow os.open relative to a directory descriptor here") from None
        if not folder.startswith("/"):
            raise Blocked(f"run_code does not allow os.open relative to {folder!r}")
        return folder

    def check_open(self, path: object, mode: object, flags: object) -> None:
        if isinstance(path, int):
            return  # an open file descriptor: no path to resolve
        text = _text(path)
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
        )
        if text is None:
            if writing:
                raise Blocked(f"run_code does not allow writing {path!r}")
            return
        if mode is None and not text.startswith("/"):  # os.open, relative: to what?
            dir_fd = self.os_open_dir_fd()
            if dir_fd not in _UNSET_DIR_FDS:
                if writing:
                    raise Blocked(
                        f"run_code does not allow os.open of {path!r} for writing relative to a directory descriptor"
                    )
                text = os.path.join(self.fd_folder(dir_fd), text)
        self.check_readable(text, path)
        if writing and not self.inside(text):
            raise Blocked(f"run_code does not allow writing {path!r} (outside its working folder)")

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
            if event == "socket.__new__" and _making_event_loop():
                raise Blocked(NEW_LOOP)
            raise Blocked(f"run_code does not allow {event}")
        if event == "open":
            self.check_open(*args[:3])
            return
        if event in _READ_EVENTS:
            text = _text(args[0]) if args else None
            if text is not None:  # None: the cwd; an int: an open descriptor
                self.check_readable(text, args[0])
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
            if event == "os.symlink" and args:
                self.check_symlink(args[0])
            return
        if event == "import":
            if args[0].partition(".")[0] in _BLOCKED_IMPORTS:
                raise BlockedImport(f"run_code does not allow importing {args[0]}")
            if self.armed and args[0] in _REPLACED_BUILTINS:  # it was taken out of sys.modules
                raise BlockedImport(f"run_code does not allow importing {args[0]} anew")
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


def _making_event_loop() -> bool:
    """Whether the socket being made is a new event loop's self-pipe: the
    first caller outside ``socket.py`` is asyncio's ``_make_self_pipe``."""
    socket_file = getattr(sys.modules.get("socket"), "__file__", None)
    frame = sys._getframe(2)  # 0 is this function, 1 the hook
    while frame is not None and frame.f_code.co_filename == socket_file:
        frame = frame.f_back  # type: ignore[assignment]
    return frame is not None and _SELF_PIPE_CODE is not None and frame.f_code is _SELF_PIPE_CODE


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
