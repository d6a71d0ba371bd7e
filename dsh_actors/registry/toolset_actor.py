"""ToolSetActor: resolves one :class:`~dsh_actors.toolset.ResolvedToolSet`.

``rt.tools.resolve(context)`` asks the registry actor, which spawns one of
these per resolution; it evaluates every visible ``when`` once and publishes
the complete selection, or nothing (see :mod:`dsh_actors.toolset` for what
a resolved set admits and how admission shrinks).
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeAlias, assert_never

import pykka
from loguru import logger

from ..actors import ActorBase, ActorGroup, settle
from ..errors import AbortError, DshError, InvalidTypeError, RuntimeStoppedError, ToolPolicyError, safe_str
from ..model import ToolActivationContext
from ..pipeline.flights import WHEN, Flight
from ..toolset import Admission, ResolvedToolSet
from ..visibility import Registration, describe_scope
from ._private import STOPPED

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel
    from ..signals import AbortSignal

__all__ = ["ToolSetActor"]

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class _Begin:
    """Registry → tool-set actor: start evaluating."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _ConditionDone:
    """Loop thread → tool-set actor: an ``async`` condition settled."""

    registration: Registration
    value: Any
    """What the condition answered (when ``error`` is None)."""
    error: BaseException | None
    """What it raised (an ``AbortError`` when the resolution's signal cancelled it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Cancelled:
    """Aborting thread → tool-set actor: ``context.signal`` aborted."""


_Inbox: TypeAlias = _Begin | _ConditionDone | _Cancelled


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class ToolSetActor(ActorBase):
    """Resolves one :class:`ResolvedToolSet` (see the module doc), then
    stops: a published set needs no thread.

    Sync conditions run on this actor's thread, one after the other (they
    should be quick and must observe ``context.signal`` if they wait);
    ``async def`` conditions run concurrently on the resolution's event
    loop (the one that awaits ``resolve_async``, or the runtime's bound
    loop; else the runtime's own loop thread) and are cancelled if the
    resolution fails or is cancelled.
    """

    def __init__(
        self,
        group: ActorGroup,
        kernel: Kernel,
        context: ToolActivationContext,
        reply: Any,
        loop: Any = None,
        caller_context: contextvars.Context | None = None,
    ) -> None:
        super().__init__(group)
        # The resolver's contextvars: each condition runs in a copy (an
        # async one as a task made in that copy).
        self._vars = contextvars.Context() if caller_context is None else caller_context
        self._loop = loop  # where async conditions run (None: the runtime's loop thread)
        self._kernel = kernel
        self._context = context
        self._reply = reply
        self._admission: Admission | None = None
        self._candidates: Mapping[str, Registration] = _EMPTY
        self._answers: dict[int, Any] = {}
        self._pending: dict[int, Flight] = {}
        self._finished = False
        self._unsubscribe: Any = None

    def __repr__(self) -> str:
        return f"<ToolSetActor {describe_scope(self._context.agent)} finished={self._finished}>"

    def receive(self, message: Any) -> Any:
        if not isinstance(message, (_Begin, _ConditionDone, _Cancelled)):
            raise InvalidTypeError(f"a tool-set actor does not understand {type(message).__qualname__}")
        inbox: _Inbox = message
        match inbox:
            case _Begin():
                try:
                    self._begin()
                except BaseException as exc:  # noqa: BLE001 - never leave the resolver waiting
                    self._fail(exc)
            case _ConditionDone():
                self._condition_done(inbox)
            case _Cancelled():
                self._fail(self._abort_error())
            case _:
                assert_never(inbox)
        return None

    def on_stop(self) -> None:
        # Stopped before it finished (the runtime stopping): never leave the
        # resolver waiting.
        self._fail(RuntimeStoppedError(STOPPED), stop=False)

    # -- evaluation --------------------------------------------------------

    def _begin(self) -> None:
        context = self._context
        signal: AbortSignal = context.signal
        admission = self._admission = Admission(self._kernel.state, context.agent)
        self._kernel.state.add_toolset(admission)
        self._candidates = candidates = admission.begin()
        if signal.aborted:
            self._fail(self._abort_error())
            return
        self._unsubscribe = signal.add_callback(self._on_abort)
        for reg in candidates.values():
            when = reg.when
            if when is None:
                continue
            if signal.aborted or self._finished:
                self._fail(self._abort_error())
                return
            vars_ = self._vars.copy()
            try:
                answer = vars_.run(when, context)
            except BaseException as exc:  # noqa: BLE001 - fails the resolution
                self._fail(self._condition_error(reg, exc))
                return
            if inspect.isawaitable(answer):
                # A flight on the resolution's loop, as an async tool body:
                # cancelled when the signal fires (or the resolution fails),
                # never abandoned; its end comes back as a message.
                loop = self._kernel.loop.loop if self._loop is None else self._loop
                if loop.is_closed() or not loop.is_running():
                    if inspect.iscoroutine(answer):
                        answer.close()
                    self._fail(
                        RuntimeError(
                            f'the event loop that runs the activation condition of tool "{reg.name}" is not running'
                        )
                    )
                    return
                # Made in the resolution's context copy, which its task then runs in.
                # (A coroutine as it is, so a flight that never starts closes it;
                # any other awaitable in a coroutine that awaits it.)
                coro = answer if inspect.iscoroutine(answer) else _awaited(answer)
                flight = vars_.run(
                    Flight,
                    coro,
                    signal,
                    loop,
                    reg.name,
                    WHEN,
                    self._ended(reg),
                    what=f'the async activation condition of tool "{reg.name}"',
                )
                self._pending[reg.seq] = flight
                self._kernel.loop_watch.launch(flight)
            else:
                self._answer(reg, answer)
        self._maybe_finish()

    def _on_abort(self, _signal: AbortSignal) -> None:
        # On the aborting thread: hand it to the mailbox.
        try:
            self.actor_ref.tell(_Cancelled())
        except pykka.ActorDeadError:
            pass

    def _ended(self, reg: Registration) -> Any:
        def ended(value: Any, error: BaseException | None) -> None:
            # On the loop's thread (or the watch's): a message, nothing else.
            try:
                self.actor_ref.tell(_ConditionDone(registration=reg, value=value, error=error))
            except pykka.ActorDeadError:
                pass

        return ended

    def _condition_done(self, message: _ConditionDone) -> None:
        if self._finished:
            return
        reg = message.registration
        self._pending.pop(reg.seq, None)
        exc = message.error
        if exc is not None:
            self._fail(self._condition_error(reg, exc))
            return
        self._answer(reg, message.value)
        self._maybe_finish()

    def _answer(self, reg: Registration, answer: Any) -> None:
        """Record ``reg``'s answer: only exactly ``True`` admits its tool.
        Anything else but ``False`` (a forgotten ``return`` is None) does not
        either, and says so in a warning, so the tool is not hidden without
        a word (the library's log is silent unless the application enables
        it)."""
        if type(answer) is not bool:
            logger.warning(
                'the activation condition of tool "{}" ({}) returned {}, not True or False: the tool is not '
                "offered this step (return a bool)",
                reg.name,
                describe_scope(reg.scope),
                type(answer).__qualname__,
            )
        self._answers[reg.seq] = answer

    def _maybe_finish(self) -> None:
        if self._finished or self._pending:
            return
        if self._context.signal.aborted:
            self._fail(self._abort_error())
            return
        admission = self._admission
        assert admission is not None
        answers = self._answers
        admitted = {
            name: reg for name, reg in self._candidates.items() if reg.when is None or answers.get(reg.seq) is True
        }
        admission.publish(admitted)
        ts = ResolvedToolSet(admission)
        self._finished = True
        self._detach()
        # From here on only the caller holds the set: this actor's work is
        # done, and it stops (the set needs no thread).
        self._admission = None
        self._candidates = _EMPTY
        self._answers = {}
        reply, self._reply = self._reply, None
        settle(reply, ts)
        self.stop()

    # -- endings -----------------------------------------------------------

    def _detach(self) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()

    def _fail(self, exc: BaseException, *, stop: bool = True) -> None:
        if self._finished:
            return
        self._finished = True
        self._detach()
        pending, self._pending = self._pending, {}
        for flight in pending.values():
            flight.cancel()
        if self._admission is not None:
            self._admission.abandon()
        reply, self._reply = self._reply, None
        settle(reply, error=exc)
        if stop:
            self.stop()

    def _abort_error(self) -> AbortError:
        reason = self._context.signal.reason
        err = AbortError(reason=reason)
        if isinstance(reason, BaseException):
            err.__cause__ = reason
        return err

    def _condition_error(self, reg: Registration, exc: BaseException) -> DshError:
        if self._context.signal.aborted:
            err: DshError = self._abort_error()
        else:
            detail = safe_str(exc)
            err = ToolPolicyError(
                f'the activation condition of tool "{reg.name}" ({describe_scope(reg.scope)})',
                f"raised {type(exc).__name__}" + (f": {detail}" if detail else ""),
            )
        err.__cause__ = exc
        return err
