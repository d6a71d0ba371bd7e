"""The interactive terminal prompt of :mod:`policies.approval` (private;
use ``policies.approval.TerminalPrompt``)."""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from typing import IO, Any, Final

import orjson

from dsh_actors import AbortSignal, ApprovalRequest, InvalidTypeError, InvalidValueError, printable, thaw

from ._answer import ALLOWED_ONCE, CANCELLED, REJECTED, UNAVAILABLE, Answer, Memory, Service

__all__ = ["PROMPT", "TerminalPrompt", "printable"]

_POLICY: Final = "policies.approval"

_CHOICES: Final = {
    "y": Answer(ALLOWED_ONCE),
    "yes": Answer(ALLOWED_ONCE),
    "n": Answer(REJECTED),
    "no": Answer(REJECTED),
    "a": Answer(ALLOWED_ONCE, remember=True),
    "always": Answer(ALLOWED_ONCE, remember=True),
    "never": Answer(REJECTED, remember=True),
}
PROMPT: Final = "Allow? [y]es / [n]o / [a]lways / never: "


class _Signalled:
    __slots__ = ()


_ABORTED: Final = _Signalled()


def _aborted(signal: AbortSignal) -> bool:
    return signal.aborted


def _missing(stream: object) -> bool:
    """Whether a standard stream is missing: ``sys.stdin``/``sys.stdout`` is
    None in a process started without it (a service, ``0<&-``)."""
    return stream is None


def _localized(display: Any, locale: str) -> str | None:
    if isinstance(display, str):
        return display
    get = getattr(display, "get", None)
    if not callable(get):
        return None
    for key in (locale, "en"):
        value = get(key)
        if isinstance(value, str):
            return value
    return None


class TerminalPrompt(Service):
    """Ask a person at a terminal.

    ``input``/``output`` are text streams (default ``sys.stdin`` /
    ``sys.stdout``, looked up per request). When ``input`` has a real file
    descriptor (a terminal, a pipe, a file) the prompt reads it directly,
    waiting with a selector, so it wakes up the moment ``request.signal``
    fires and answers ``"cancelled"`` (a regular file, always ready, is read
    without waiting); it then owns that descriptor's input (text buffered
    in the stream object is not seen). A stream without a descriptor
    (``io.StringIO``) is read with ``readline()``.

    Answers: ``y``/``yes`` → ``"allowed-once"``, ``n``/``no`` →
    ``"rejected"``, ``a``/``always`` → ``"allowed-once"`` (remember),
    ``never`` → ``"rejected"`` (remember); anything else asks again. End of
    input (or an unusable terminal, or a process started without standard
    input or output) → ``"unavailable"``; once input that is
    not a terminal has ended (a pipe, a file, ``/dev/null``), later requests
    get ``"unavailable"`` with one line, not the question again. Text from the model
    is shown with control characters escaped; arguments are shown as
    indented JSON, cut after ``max_argument_chars``.

    "always" and "never" are kept: a later request for the same tool with
    the exact same arguments (and, with ``per_agent=True``, the default,
    from the same agent) gets that answer without a prompt. ``forget()``
    drops them; ``remember=False`` keeps nothing (the answers still carry
    ``remember=True`` for a :class:`RememberingService` around the prompt).
    """

    def __init__(
        self,
        input: IO[str] | None = None,
        output: IO[str] | None = None,
        *,
        locale: str = "en",
        max_argument_chars: int = 4000,
        remember: bool = True,
        per_agent: bool = True,
    ) -> None:
        if type(max_argument_chars) is not int or max_argument_chars < 1:
            raise InvalidValueError(f"{_POLICY}: max_argument_chars must be a positive integer")
        if type(locale) is not str:
            raise InvalidTypeError(f"{_POLICY}: locale must be a str such as 'en'")
        if type(remember) is not bool:
            raise InvalidTypeError(f"{_POLICY}: remember must be True or False")
        self._memory = Memory(per_agent=per_agent) if remember else None
        self._input = input
        self._output = output
        self.locale = locale
        self.max_argument_chars = max_argument_chars
        self._turn = threading.Condition(threading.Lock())
        self._busy = False
        self._pending = b""  # read past a line's end, for the next prompt
        self._closed_input = False  # the input ended for good (not a terminal's Ctrl-D)

    # -- streams -------------------------------------------------------------

    @property
    def input(self) -> IO[str]:
        if self._input is not None:
            return self._input
        import sys

        return sys.stdin

    @property
    def output(self) -> IO[str]:
        if self._output is not None:
            return self._output
        import sys

        return sys.stdout

    def _write(self, text: str) -> None:
        out = self.output
        if _missing(out):
            return
        out.write(text)
        out.flush()

    # -- one at a time -----------------------------------------------------------

    def _acquire(self, request: ApprovalRequest) -> bool:
        signal = request.signal

        def wake(_: object) -> None:
            with self._turn:
                self._turn.notify_all()

        unsubscribe = signal.add_callback(wake)
        try:
            with self._turn:
                while self._busy and not signal.aborted:
                    self._turn.wait()
                if signal.aborted:
                    return False
                self._busy = True
                return True
        finally:
            unsubscribe()

    def _release(self) -> None:
        with self._turn:
            self._busy = False
            self._turn.notify_all()

    # -- reading -------------------------------------------------------------

    def _fileno(self) -> int | None:
        if os.name != "posix":
            return None
        try:
            fd = self.input.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
            return None
        return fd if isinstance(fd, int) and fd >= 0 else None

    def _readline(self, request: ApprovalRequest) -> str | None | _Signalled:
        """One line, ``None`` at end of input, ``_ABORTED`` when the signal fires."""
        signal = request.signal
        if signal.aborted:
            return _ABORTED
        fd = self._fileno()
        if fd is None:
            line = self.input.readline()
            if _aborted(signal):  # it fired while readline blocked
                return _ABORTED
            return line if line else None
        return self._read_fd(fd, request)

    def _at_end_for_good(self) -> bool:
        """Whether the input, at its end now, stays there: anything but a
        terminal (where Ctrl-D ends one read, and the next prompt reads again)."""
        try:
            return not self.input.isatty()
        except (AttributeError, OSError, ValueError):
            return True

    def _take_line(self, at_eof: bool) -> str | None:
        data = self._pending
        end = data.find(b"\n")
        if end < 0:
            if not at_eof or not data:
                return None
            end = len(data) - 1
        line, self._pending = data[: end + 1], data[end + 1 :]
        return line.decode("utf-8", "replace")

    def _read_fd(self, fd: int, request: ApprovalRequest) -> str | None | _Signalled:
        signal = request.signal
        line = self._take_line(at_eof=False)
        if line is not None:
            return line
        wake_r, wake_w = os.pipe()
        guard = threading.Lock()
        closed = False

        def wake(_: object) -> None:
            with guard:  # never write to a descriptor number that was closed (and maybe reused)
                if not closed:
                    os.write(wake_w, b"!")

        unsubscribe = signal.add_callback(wake)
        selector = selectors.DefaultSelector()  # epoll/kqueue: no FD_SETSIZE limit
        try:
            try:
                selector.register(fd, selectors.EVENT_READ)
            except PermissionError:
                # EPERM: epoll cannot wait on it (a regular file, /dev/null),
                # as such a file is always ready: read it without waiting.
                waits = False
            else:
                waits = True
                selector.register(wake_r, selectors.EVENT_READ)
            while True:
                if signal.aborted:
                    return _ABORTED
                if waits and wake_r in {key.fd for key, _ in selector.select()}:
                    return _ABORTED
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the terminal went away
                    chunk = b""
                if not chunk:
                    return self._take_line(at_eof=True)
                self._pending += chunk
                line = self._take_line(at_eof=False)
                if line is not None:
                    return line
        finally:
            unsubscribe()
            selector.close()
            with guard:
                closed = True
                os.close(wake_r)
                os.close(wake_w)

    # -- the prompt ----------------------------------------------------------

    def describe(self, request: ApprovalRequest) -> str:
        """What the person is shown before the question."""
        lines = ["", "Tool call needs approval"]
        if request.agent is not None:
            lines.append(f"  agent:     {printable(request.agent.path)}")
        lines.append(f"  tool:      {printable(request.tool_name)}")
        lines.append(f"  call:      {printable(request.call_id)}")
        shown = _localized(request.display_reason, self.locale)
        if shown is None and isinstance(request.reason, str) and request.reason:
            shown = request.reason
        if shown:
            lines.append(f"  reason:    {printable(shown)}")
        lines.append("  arguments:")
        lines.extend("    " + line for line in self._arguments(request.arguments).splitlines())
        return "\n".join(lines) + "\n"

    def _arguments(self, arguments: Any) -> str:
        try:
            text = orjson.dumps(thaw(arguments), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
        except Exception:  # noqa: BLE001 - show something rather than fail the prompt
            text = repr(arguments)
        limit = self.max_argument_chars
        if len(text) > limit:
            text = f"{text[:limit]}\n... ({len(text) - limit} more characters)"
        return printable(text, keep_newlines=True)

    def forget(self, tool_name: str | None = None) -> None:
        """Forget every remembered answer (of ``tool_name`` only, if given)."""
        if self._memory is not None:
            self._memory.forget(tool_name)

    def __len__(self) -> int:
        """The number of answers remembered."""
        return 0 if self._memory is None else len(self._memory)

    def decide(self, request: ApprovalRequest) -> Answer:
        memory = self._memory
        if memory is not None:
            known = memory.recall(request)
            if known is not None:
                return Answer(known)
        answer = self._ask(request)
        if memory is not None:
            memory.keep(request, answer)
        return answer

    def _ask(self, request: ApprovalRequest) -> Answer:
        if not self._acquire(request):
            return Answer(CANCELLED)
        try:
            try:
                if self._closed_input or _missing(self.input) or _missing(self.output):
                    # (A pipe or file at its end stays there, and a process
                    # started without a standard stream has none: the
                    # question is not printed for nobody to answer.)
                    self._write(f'no answer for tool "{printable(request.tool_name)}" (input closed)\n')
                    return Answer(UNAVAILABLE)
                self._write(self.describe(request))
                while True:
                    self._write(PROMPT)
                    line = self._readline(request)
                    if line is _ABORTED:
                        self._write("\napproval cancelled\n")
                        return Answer(CANCELLED)
                    if line is None:
                        self._write("\nno answer (input closed)\n")
                        self._closed_input = self._at_end_for_good()
                        return Answer(UNAVAILABLE)
                    assert isinstance(line, str)
                    choice = _CHOICES.get(line.strip().lower())
                    if choice is not None:
                        return choice
                    self._write("please answer y, n, a (always) or never\n")
            except (OSError, ValueError):  # a closed or broken terminal, input it cannot wait on
                if request.signal.aborted:
                    return Answer(CANCELLED)
                self._closed_input = self._at_end_for_good()
                with contextlib.suppress(OSError, ValueError):  # (the terminal itself may be gone)
                    self._write("\nno answer (input closed)\n")
                return Answer(UNAVAILABLE)
        finally:
            self._release()
