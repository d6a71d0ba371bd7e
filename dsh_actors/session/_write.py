"""The session's file handle: an unbuffered ``FileIO`` whose ``write`` keeps
the GIL across the system call when the file is a regular file on a local
disk file system.

Why. ``os.write`` and ``FileIO.write`` release the GIL around ``write(2)``.
In a runtime whose other threads want the GIL (call actors, the executor),
every release hands it to one of them, and the writer, back from a 1 µs
system call, waits for it until that thread blocks: two context switches
an event, three events a logged call, about 10 µs of a 65 µs realistic
call at cap 10 on a quiet machine (``benchmarks/HOPS.md``, "The session
log's writes"). Holding the GIL across a small append to the page cache
costs what the system call costs and nothing more.

When. Only where ``write(2)`` cannot wait on anything but the kernel's own
page cache: a regular file (not a pipe, FIFO, socket or terminal, whose
reader may be a thread of this process) on a file system from
:data:`LOCAL_FILE_SYSTEMS` (not NFS, SMB, FUSE or any other whose write
may wait on a server or on a process), and a write of at most
:data:`HELD_WRITE_MAX` bytes. Anything else, and anywhere off Linux, is
written by ``FileIO.write``. Both are the same ``write(2)`` of the
same bytes at the same moment: only who may run Python meanwhile differs,
so the log's guarantees (one write an event, reaching the OS before the
append returns, a short or failed write cut back) are the same either way.
"""

from __future__ import annotations

import ctypes
import io
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, Final

# statfs(2) f_type magic numbers of Linux's local disk and memory file
# systems (linux/magic.h): a write to one of them waits only on the kernel.
LOCAL_FILE_SYSTEMS: Final[frozenset[int]] = frozenset(
    {
        0xEF53,  # ext2, ext3, ext4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0xF2F52010,  # f2fs
        0x2FC12FC1,  # zfs
        0xCA451A4E,  # bcachefs
        0x01021994,  # tmpfs
        0x858458F6,  # ramfs
        0x794C7630,  # overlayfs (containers' root)
    }
)


#: The largest write that keeps the GIL: copying a larger one into the page
#: cache takes long enough (tens of microseconds and up) that other threads
#: should run meanwhile, and the hand-off is small beside it.
HELD_WRITE_MAX: Final = 64 * 1024


def _libc_write() -> Callable[[int, bytes, int], int] | None:
    """libc's ``write``, called with the GIL held (a ``PyDLL`` function),
    or None where there is no such libc.

    No ``argtypes`` and no ``use_errno``: ctypes converts the three
    arguments itself (an ``int`` fd, the ``bytes``' buffer, and the length
    as a C ``int``, which holds any length up to :data:`HELD_WRITE_MAX` and
    which libffi widens to the ``size_t`` register unchanged), about half
    of what typed arguments and the errno swap cost a call (counted with
    callgrind). On failure (-1: nothing was
    written) the write is made again by ``FileIO.write``, which raises the
    error with its errno."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        write = ctypes.PyDLL(None).write
    except (OSError, AttributeError):
        return None
    write.restype = ctypes.c_ssize_t
    return write


def _libc_fstatfs() -> Callable[[int, Any], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fstatfs = ctypes.CDLL(None, use_errno=True).fstatfs
    except (OSError, AttributeError):
        return None
    fstatfs.argtypes = (ctypes.c_int, ctypes.c_void_p)
    fstatfs.restype = ctypes.c_int
    return fstatfs


_WRITE: Final = _libc_write()
_FSTATFS: Final = _libc_fstatfs()


def file_system_type(fd: int) -> int | None:
    """The ``f_type`` of the file system that holds ``fd`` (``fstatfs(2)``),
    or None where it cannot be read."""
    if _FSTATFS is None:
        return None
    # struct statfs begins with its f_type (a long on every Linux ABI); the
    # buffer is larger than the whole struct on any of them.
    buffer = ctypes.create_string_buffer(512)
    if _FSTATFS(fd, buffer) != 0:
        return None
    return int(ctypes.c_long.from_buffer(buffer).value) & 0xFFFFFFFF


def holds_gil_while_writing(fd: int) -> bool:
    """Whether a write to ``fd`` may keep the GIL (see the module docstring)."""
    if _WRITE is None:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
    except OSError:
        return False
    return file_system_type(fd) in LOCAL_FILE_SYSTEMS


class SessionFile(io.FileIO):
    """An unbuffered ``FileIO`` opened ``a+`` (appends, reads for the
    session's checks), whose ``write`` of ``bytes`` keeps the GIL across
    ``write(2)`` when :func:`holds_gil_while_writing` allows it and it is at
    most :data:`HELD_WRITE_MAX` bytes. Every other method, and any other
    write (a larger one, the rest of a short write, a memoryview), is
    ``FileIO``'s."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(os.fspath(path), "a+")  # (an error names the path, not its repr)
        self._fd = self.fileno()
        self._held_write = _WRITE if holds_gil_while_writing(self._fd) else None
        # The path it was opened by, made absolute (a later chdir changes
        # nothing), for at_path.
        self._where = os.fsencode(os.path.abspath(path))

    @property
    def holds_gil(self) -> bool:
        """Whether a write keeps the GIL across ``write(2)``."""
        return self._held_write is not None

    def close(self) -> None:
        self._held_write = None  # (first: no held write to a closed descriptor)
        super().close()

    def at_path(self) -> tuple[int, int, int]:
        """The device, inode and size (``os.stat``'s ``st_dev``, ``st_ino``
        and ``st_size``) of the file the path this file was opened by leads
        to now, following symbolic links: this file's, unless it was
        replaced, moved or removed since. Raises ``OSError``
        (``FileNotFoundError``: nothing is there) when it cannot be read."""
        found = os.stat(self._where)
        return found.st_dev, found.st_ino, found.st_size

    def write(self, data: Any) -> int:
        held_write = self._held_write
        if held_write is not None and type(data) is bytes:
            size = len(data)
            if size <= HELD_WRITE_MAX:
                written: int = held_write(self._fd, data, size)
                if written >= 0:
                    return written
                # -1: nothing was written (an error, or EINTR). FileIO's
                # write makes the system call again: it retries EINTR, and
                # raises the error as OSError with its errno.
        written_or_none = super().write(data)
        return 0 if written_or_none is None else written_or_none
