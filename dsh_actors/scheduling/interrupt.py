"""Ctrl-C while a caller blocks for a batch: the batch is aborted.

Python raises Ctrl-C's ``KeyboardInterrupt`` (and whatever else a signal
handler raises) in the main thread, into whatever it waits on: a lock
waited on without a timeout is interrupted there. A caller that blocks on
the main thread for a batch (``rt.tools.execute``, ``resume``,
``recover``, ``NativeExecutor.execute``) gives the batch the signal of an
:class:`Interruptible`, which follows the batch's own; when such an
exception ends the wait, it aborts the batch and waits for it to settle
before the exception goes on (a second one leaves that wait at once, the
batch still aborted), as a cancelled ``execute_async`` does. No polling:
the wait is the one the caller makes anyway. On any other thread nothing
is made (a tool body's nested batch sees the abort through its body's
signal instead).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from ..signals import AbortController, AbortSignal

__all__ = ["Interruptible"]

_MAIN = threading.main_thread()


class Interruptible:
    """Around a blocking wait for a batch (see the module docstring):
    ``with Interruptible(batch.signal) as guard:`` start the batch with
    ``guard.signal`` when it is not None (the signal to give the batch in
    place of its own), then ``guard.started(done, wait)`` once the batch
    owns its reply (``done()``: whether it has settled; ``wait()``: block
    until it has), then wait. Not reusable."""

    __slots__ = ("_controller", "_done", "_wait")

    def __init__(self, signal: object) -> None:
        self._controller: AbortController | None = None
        self._done: Callable[[], bool] | None = None
        self._wait: Callable[[], object] | None = None
        if threading.get_ident() == _MAIN.ident:
            if signal is None:
                self._controller = AbortController()
            elif isinstance(signal, AbortSignal):
                self._controller = AbortController(signal)
            # (anything else: the batch's own check refuses it)

    @property
    def signal(self) -> AbortSignal | None:
        """The signal to give the batch instead of its own; None: keep it."""
        controller = self._controller
        return None if controller is None else controller.signal

    def started(self, done: Callable[[], bool], wait: Callable[[], object]) -> None:
        """The batch owns its reply now: an interrupt from here aborts it
        and waits for it."""
        self._done = done
        self._wait = wait

    def __enter__(self) -> Interruptible:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        controller = self._controller
        if controller is None:
            return
        try:
            done = self._done
            # An interrupt, not the batch's own error (an Exception it
            # settled with). One that reached the batch's start settled the
            # reply with it (the start answers any exception so): the batch
            # may be running all the same, so it is aborted too.
            if exc is not None and done is not None and (not done() or not isinstance(exc, Exception)):
                controller.abort(f"the wait for the batch was interrupted ({type(exc).__name__})")
                wait = self._wait
                assert wait is not None
                if not done():  # (settled: nothing more to wait for, whatever the wait was doing)
                    wait()  # (a second interrupt leaves at once; the batch stays aborted)
        finally:
            controller.signal.close()
