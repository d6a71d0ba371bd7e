"""What presenters see, and the fallbacks: :class:`ToolResultProjection`
(the durable fields of a result, what a replay has), :data:`PresentedResult`,
the generic cards used when a tool gives none, and :func:`presenter_failed`,
the warning when a presenter breaks and its generic card is shown instead
(:func:`checked_view` calls a presenter under that rule).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar

from loguru import logger

from ..errors import LosslessJsonError, exception_text
from ..json import materialize
from ..model import ContentBlock, ToolExecutionFailure, ToolExecutionSuccess, ToolFailure
from ._cards import GenericCallView, GenericResultView

__all__ = [
    "PresentedResult",
    "ToolResultProjection",
    "checked_view",
    "generic_call_view",
    "generic_result_view",
    "presenter_failed",
]

_View = TypeVar("_View")


@dataclass(frozen=True, slots=True)
class ToolResultProjection:
    """The durable projection of a result: what ``present_result`` may use.

    It holds only the fields a ``tool/result`` log event keeps (``content``,
    ``is_error``, ``error``, ``meta``; never the canonical value), so a
    replay can call presenters from the log alone. Live calls pass the real
    :class:`~dsh_actors.model.ToolExecutionSuccess` /
    :class:`~dsh_actors.model.ToolExecutionFailure`, which has the same
    attributes; a presenter that reads only these four behaves the same
    live and on replay.
    """

    content: tuple[ContentBlock, ...]
    is_error: bool
    error: ToolFailure | None = None
    meta: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))

    @classmethod
    def of(cls, result: PresentedResult) -> ToolResultProjection:
        """The durable projection of a live result (or of a projection)."""
        return cls(content=result.content, is_error=result.is_error, error=result.error, meta=result.meta)


PresentedResult: TypeAlias = ToolExecutionSuccess | ToolExecutionFailure | ToolResultProjection
"""What ``present_result``'s second argument is: a live result or its
durable projection."""


def generic_call_view(name: str, args: Any) -> GenericCallView:
    """The fallback pending card: title = tool name, the raw arguments as
    input (left out when they are not lossless JSON). Used when a tool is
    unknown or its ``present_call`` returned ``None``."""
    try:
        raw_input = materialize(args, "args")
    except LosslessJsonError:
        raw_input = None
    return GenericCallView(title=name, raw_input=raw_input)


def generic_result_view(result: PresentedResult) -> GenericResultView:
    """The fallback completed card: no title (keep the pending one) and the
    result's raw content. Used when a tool is unknown or its
    ``present_result`` returned ``None``."""
    return GenericResultView(content=tuple(result.content))


_FIXES: Final = {
    "present_call": "fix present_call, or have it return None for the generic card",
    "present_result": (
        "fix present_result, or have it return None for the generic card; drawn from a log (a replay, the "
        "dsh-actors command) it gets a ToolResultProjection: content, is_error, error and meta, no value (keep "
        "what the card needs in presentation_meta)"
    ),
}
_WARNED_LIMIT: Final = 1024
_warned_lock = threading.Lock()
_warned: set[tuple[str, str, str]] = set()


def first_failure(tool: str, role: str, kind: str) -> bool:
    """Whether this is the first time in the process that ``tool``'s
    callback ``role`` failed this ``kind`` of way (the exception's class,
    or what it returned): the callbacks that run for every call warn once
    per tool, callback and kind of failure, not per call."""
    key = (tool, role, kind)
    if key in _warned:  # (read without the lock: a set's membership test is atomic; told already)
        return False
    with _warned_lock:
        if key in _warned:
            return False
        if len(_warned) >= _WARNED_LIMIT:
            _warned.clear()
        _warned.add(key)
    return True


def presenter_failed(tool: str, role: str, kind: str, problem: str) -> None:
    """Log at WARNING that ``tool``'s presenter ``role`` (``present_call``
    or ``present_result``) failed (``problem``: ``raised KeyError: 'x'``,
    ``returned a value of type str, not a ToolResultView (or None)``) and
    its generic card is shown instead, naming the fix. Presenters run for
    every call and again on every replay, so each tool, presenter and
    ``kind`` of failure is logged once in the process
    (:func:`first_failure`)."""
    if not first_failure(tool, role, kind):
        return
    logger.warning(
        'tool "{}": {} {}; the generic card is shown instead: {}', tool, role, problem, _FIXES.get(role, f"fix {role}")
    )


def checked_view(
    tool: str,
    role: str,
    kind: type[_View],
    presenter: Callable[..., Any],
    inputs: tuple[Any, ...],
    is_valid: Callable[[Any], bool] | None = None,
) -> _View | None:
    """``presenter(*inputs)`` when it returns a ``kind`` (or None); None,
    never an exception, when it raises or returns anything else, with
    :func:`presenter_failed`'s warning (the caller then shows the generic
    card). With ``is_valid``, None without calling it when the arguments
    (``inputs[0]``) are not valid. The one rule of a presenter call: the
    guarded presenters of ``define_tool``/``@tool``, and the command's and
    the ACP bridge's cards of a raw definition's presenters use it."""
    try:
        if is_valid is not None and not is_valid(inputs[0]):
            return None
        view = presenter(*inputs)
    except KeyboardInterrupt:
        raise  # (Ctrl-C on the main thread, drawing a command's cards: it still stops the command)
    except BaseException as err:  # noqa: BLE001 - presenters never raise
        presenter_failed(tool, role, type(err).__qualname__, f"raised {exception_text(err)}")
        return None
    if view is not None and not isinstance(view, kind):
        got = type(view).__qualname__
        presenter_failed(
            tool, role, f"returned {got}", f"returned a value of type {got}, not a {kind.__name__} (or None)"
        )
        return None
    return view
