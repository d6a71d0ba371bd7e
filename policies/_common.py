"""Small pieces the policies share: an idempotent disposer, config checks,
and the types the core's public surface does not name.

Private to ``policies``; nothing here is part of a policy's API.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, Generic, TypeAlias, TypeVar

from dsh_actors import (
    AbortSignal,
    Accept,
    ErrorCode,
    ImageBlock,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    ReasoningBlock,
    TextBlock,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolRuntime,
)

__all__ = [
    "Batches",
    "ContentBlock",
    "PerProvider",
    "ToolExecutionResult",
    "UNSET",
    "Undo",
    "applied",
    "check_bool",
    "check_callable",
    "check_names",
    "check_positive_int",
    "check_positive_number",
    "check_runtime",
    "code_of",
    "counted_name",
    "listens",
]

# The core defines these two aliases but does not export them.
ToolExecutionResult: TypeAlias = ToolExecutionSuccess | ToolExecutionFailure
ContentBlock: TypeAlias = TextBlock | ImageBlock | ReasoningBlock

#: ``Accept().value`` when no value replacement was given (the core's
#: ``UNSET`` sentinel, which it does not export).
UNSET: Any = Accept().value

_ERROR = "ERROR"


_T = TypeVar("_T")


class Batches(Generic[_T]):
    """Which batch a call belongs to, as a policy sees it from the call's own
    hooks (the one rule of ``policies.trace`` and ``policies.metrics``): a
    batch's calls share one ``execution.signal``, the batch's own (its
    caller's signal, if any, fused with the stop), which no other batch's
    calls see; not a thread, as its steps may run on an executor actor or
    on the call actor that takes one. A call id seen again under one signal
    opens the next batch all the same. Each batch keeps the value its first
    call gave (:meth:`of`), forgotten with its signal. Not thread-safe: used
    under the policy's lock."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: weakref.WeakKeyDictionary[AbortSignal, tuple[_T, set[str]]] = weakref.WeakKeyDictionary()

    def of(self, execution: ToolExecution, first: _T) -> _T:
        """The value of the batch of ``execution``: ``first`` when it is the
        batch's first call (its first time here)."""
        key = execution.signal
        current = self._seen.get(key)
        if current is None or execution.call_id in current[1]:
            current = self._seen[key] = (first, set())
        current[1].add(execution.call_id)
        return current[0]

    def clear(self) -> None:
        self._seen.clear()


class PerProvider(Generic[_T]):
    """One object per OpenTelemetry meter provider, made at its first use
    (OpenTelemetry keeps the first instrument of a name, so an instrument is
    made once per provider): keyed weakly, so a provider the application
    drops is freed; one that cannot be weakly keyed gets a new object each
    time. Thread-safe: :meth:`of` makes under :attr:`lock`."""

    __slots__ = ("lock", "_made")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._made: weakref.WeakKeyDictionary[Any, _T] = weakref.WeakKeyDictionary()

    def of(self, meter_provider: Any, make: Callable[[], _T]) -> _T:
        """The object of ``meter_provider``: ``make()`` at its first use (one
        that raises leaves nothing behind: a later use makes it again)."""
        with self.lock:
            try:
                found = self._made.get(meter_provider)
            except TypeError:
                found = None
            if found is None:
                found = make()
                try:
                    self._made[meter_provider] = found
                except TypeError:
                    pass
            return found


class Undo:
    """An idempotent disposer: runs each undo step once, last first.

    Thread-safe; calling it again does nothing. ``rt.use`` wraps it in the
    core's own disposer, so it is only ever called through that.
    """

    __slots__ = ("_lock", "_steps", "_done")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: list[Callable[[], object]] = []
        self._done = False

    def add(self, step: Callable[[], object]) -> None:
        with self._lock:
            if self._done:
                raise InvalidStateError("this policy was already disposed")
            self._steps.append(step)

    @property
    def disposed(self) -> bool:
        return self._done

    def __call__(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            steps, self._steps = self._steps, []
        first_error: BaseException | None = None
        for step in reversed(steps):
            try:
                step()
            except BaseException as exc:  # noqa: BLE001 - run every step, raise the first failure
                if first_error is None:
                    first_error = exc
        if first_error is not None:
            raise first_error

    def __repr__(self) -> str:
        return f"<policy disposer {'disposed' if self._done else 'active'}>"


def check_runtime(policy: str, rt: object) -> ToolRuntime:
    if not isinstance(rt, ToolRuntime):
        raise InvalidTypeError(f"{policy}: apply() takes a ToolRuntime, not {type(rt).__qualname__}")
    return rt


def check_no_unknown(policy: str, unknown: Collection[str], *takes: str) -> None:
    """Refuse the options ``apply`` does not take (its ``**unknown``),
    naming the ones it does."""
    if unknown:
        raise InvalidTypeError(
            f"{policy}: unknown option(s) {sorted(unknown)}; it takes {', '.join(f'{name}=' for name in takes)}"
        )


def check_bool(policy: str, name: str, value: object) -> bool:
    if type(value) is not bool:
        raise InvalidTypeError(f"{policy}: {name} must be True or False, got {value!r}")
    return value


def _shown(value: object, spec: str = "r") -> str:
    """``value`` for a config error (``format`` ``spec``, ``"r"``: its repr),
    but an int too long to print (or to turn into a float) by its size."""
    if type(value) is int and value.bit_length() > 64:  # (the core's errors.shown_value: policies use the public API)
        return f"an int of {value.bit_length()} bits"
    return repr(value) if spec == "r" else format(value, spec)


def check_positive_number(policy: str, name: str, value: object, *, most: float | None = None) -> float:
    # (An int is finite however large, but may not fit a float: never math.isfinite'd.)
    kind = type(value)
    finite = kind is int or (kind is float and math.isfinite(value))  # type: ignore[arg-type]
    if not finite or value <= 0:  # type: ignore[operator]
        raise InvalidValueError(f"{policy}: {name} must be a positive finite number, got {_shown(value)}")
    if most is not None and value > most:  # type: ignore[operator]
        raise InvalidValueError(f"{policy}: {name} must be at most {most:g}, got {_shown(value, 'g')}")
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise InvalidValueError(f"{policy}: {name} must be a positive finite number, got {_shown(value)}") from None


def check_positive_int(policy: str, name: str, value: object, *, most: int | None = None) -> int:
    if type(value) is not int or value < 1:
        raise InvalidValueError(f"{policy}: {name} must be a positive integer, got {_shown(value)}")
    if most is not None and value > most:
        raise InvalidValueError(f"{policy}: {name} must be at most {most:,}, got {_shown(value, ',')}")
    return value


def check_callable(policy: str, name: str, value: object) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise InvalidTypeError(f"{policy}: {name} must be callable or None, got {type(value).__qualname__}")
    return value


def check_names(policy: str, name: str, value: object) -> frozenset[str]:
    """A collection of strings (a bare ``str`` would become its characters)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidTypeError(f"{policy}: {name} must be a collection of strings, got {value!r}")
    names = tuple(value)
    for item in names:
        if type(item) is not str or not item:
            raise InvalidTypeError(f"{policy}: {name} must contain non-empty strings, got {item!r}")
    return frozenset(names)


def code_of(result: ToolExecutionResult) -> str:
    """``"ok"`` for a success; a failure's ``error.info.code``, or ``"ERROR"``
    when it has no structured identity."""
    if type(result) is ToolExecutionSuccess:
        return "ok"
    info = result.error.info if type(result) is ToolExecutionFailure else None
    if info is None:
        return _ERROR
    code = info.code
    return str(code) if isinstance(code, (str, ErrorCode)) else _ERROR


def counted_name(execution: ToolExecution, unknown: str, code: str | None = None) -> str:
    """The name a policy that keeps something per tool (``policies.metrics``'
    counts, ``policies.otel``'s histogram) keeps the call of ``execution``
    under: its own, or ``unknown`` for every call of a name that runs no tool
    (names a model makes up would each keep an entry for good), whatever
    settled it: the pipeline found no tool of the name
    (``execution.tool_found``: arguments that are not JSON, a denial, a
    deferral or an abort may settle the call before it fails
    ``UNKNOWN_TOOL``), or the call ended with ``code`` ``UNKNOWN_TOOL`` (a
    direct call an executor routes elsewhere, PTC's, fails so whatever the
    registry has)."""
    if code == ErrorCode.UNKNOWN_TOOL or execution.tool_found is False:
        return unknown
    return execution.name


def applied(rt: ToolRuntime, event: str, kind: type[_T]) -> Iterator[_T]:
    """The objects of ``kind`` (a policy's) whose methods listen to
    ``event`` on ``rt``: the policies of that kind applied to ``rt`` and
    not disposed, in the order their listeners run."""
    for listener in rt.events.listeners(event):
        owner = getattr(listener, "__self__", None)
        if isinstance(owner, kind):
            yield owner


def listens(rt: ToolRuntime, event: str, kind: type) -> bool:
    """Whether a listener of ``event`` on ``rt`` is a method of a ``kind``
    (a policy's object): the policy is applied to ``rt`` and not disposed."""
    return next(applied(rt, event, kind), None) is not None
