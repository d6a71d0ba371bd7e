"""Building and normalising results: failures from exceptions, successes
from values, and the final lossless freeze."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..definition import default_text
from ..errors import (
    AbortError,
    DshError,
    ErrorCode,
    LosslessJsonError,
    ToolOutputError,
    ToolPolicyError,
    exception_text,
    safe_str,
    utf8_text,
)
from ..json import materialize
from ..model import (
    ContentBlock,
    TextBlock,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
    UserMessage,
    check_content,
    slot_setters,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..execution import ToolExecution

__all__ = [
    "FORGOT_NEXT",
    "aborted",
    "checked_content",
    "content_from_hook",
    "failure",
    "failure_from_exception",
    "freeze_result",
    "is_result",
    "logged_meta",
    "policy_failure",
    "presented_meta",
    "render_success",
]


#: What a waterfall listener (or wrapper) that returned None was told: the
#: usual cause is a forgotten ``return next()``.
FORGOT_NEXT = " (did it forget to return next()?)"


def failure(
    message: str,
    info: ToolErrorInfo | None = None,
    additional_contexts: tuple[UserMessage, ...] = (),
    meta: Any = None,
    exception: BaseException | None = None,
) -> ToolExecutionFailure:
    """A failure whose content is ``[TextBlock("Error: " + message)]``.
    A lone surrogate in ``message`` (a file name ``os.fsdecode`` gave, in
    an exception's text, a ``Deny``'s or a guard's reason) is shown as its
    ``\\udcff`` escape (:func:`~dsh_actors.errors.utf8_text`), as a
    ``FileNotFoundError`` quotes its file name: the text stays the tool's
    own, and lossless."""
    message = utf8_text(message)
    return ToolExecutionFailure(
        error=ToolFailure(message, info, exception),
        content=(TextBlock("Error: " + message),),
        meta=meta,
        additional_contexts=additional_contexts,
    )


def error_info(exc: DshError) -> ToolErrorInfo:
    try:
        code = str(exc.code)
    except BaseException:  # noqa: BLE001 - a subclass's hostile code: no structured code
        code = _TOOL_FAILED
    return ToolErrorInfo(name=type(exc).__name__, code=code if type(code) is str else _TOOL_FAILED)


def dsh_message(exc: DshError) -> str:
    """A :class:`DshError`'s ``message``; for a subclass that never set it
    (its ``__init__`` skipped ``DshError.__init__``) or made it something
    else, its ``str``, else what ``Exception`` prints of its arguments; else
    ``<unprintable thrown value>``. Never raises."""
    try:
        message = exc.message
        if type(message) is str:
            return message
    except BaseException:  # noqa: BLE001 - a hostile or missing message
        pass
    for show in (str, Exception.__str__):
        try:
            text = show(exc)
        except BaseException:  # noqa: BLE001
            continue
        if type(text) is str:
            return text
    return "<unprintable thrown value>"


def failure_from_exception(
    exc: BaseException, additional_contexts: tuple[UserMessage, ...] = (), *, keep: bool = False
) -> ToolExecutionFailure:
    """The failure for anything a tool, listener or renderer raised.

    A :class:`DshError` keeps its message and gets ``info`` (class name and
    code); anything else gives its ``str`` as :func:`thrown_text` names
    it (the class name when empty; a ``KeyError``'s, which is the key
    alone, after its class name; a ``SystemExit``'s, its code, after its
    class name and a note that ``sys.exit()`` was called, argparse's way
    out) and ``info`` with its class name and the code ``TOOL_FAILED``
    (``ToolErrorInfo("FileNotFoundError", "TOOL_FAILED")``), so a program
    and the log can tell one kind of failure from another. A hostile
    exception whose ``str`` raises gives ``<unprintable thrown value>``.

    The failure keeps ``exc`` as ``error.exception`` when it was raised (it
    has a traceback) or wraps one that was (its ``__cause__``): what user
    code threw, never an error the runtime only built to describe an
    outcome (``aborted()``, an unknown tool); and with ``keep`` whatever
    it is: a value that does not fit the output schema, the fault of the
    code that made it, keeps its ``ToolOutputError`` (every violation,
    where the message lists 20) however the tool was made.
    """
    kept = exc if keep or exc.__traceback__ is not None or exc.__cause__ is not None else None
    if isinstance(exc, DshError):
        return failure(dsh_message(exc), error_info(exc), additional_contexts, exception=kept)
    info = ToolErrorInfo(name=type(exc).__name__, code=_TOOL_FAILED)
    return failure(thrown_text(exc), info, additional_contexts, exception=kept)


def thrown_text(exc: BaseException) -> str:
    """What a failure says of ``exc``, which is not a :class:`DshError`:
    its ``str``; the class name when that is empty; a ``KeyError``'s (the
    key alone) and a ``SystemExit``'s (the exit code alone, with a note
    that ``sys.exit()`` was called) after the class name. Never raises."""
    name = type(exc).__name__
    message = safe_str(exc)
    if isinstance(exc, SystemExit):  # (its text is the exit code alone: '3')
        return f"{name}: {message} {_EXITED}" if message else f"{name} {_EXITED}"
    if message == "":
        return name
    if isinstance(exc, KeyError):
        return f"{name}: {message}"  # (its text is the key alone: 'missing')
    return message


def caused(error: DshError, cause: BaseException) -> DshError:
    """``error`` with ``cause`` as its ``__cause__`` (a hook's exception
    that the runtime describes with an error of its own)."""
    error.__cause__ = cause
    return error


_TOOL_FAILED = str(ErrorCode.TOOL_FAILED)
# What a SystemExit's failure says besides its code, for the developer.
_EXITED = "(sys.exit() was called: argparse calls it on arguments it cannot parse; raise an exception instead)"


def policy_failure(
    where: str, exc: BaseException, additional_contexts: tuple[UserMessage, ...] = ()
) -> ToolExecutionFailure:
    """The failure for what a policy (a ``tools/pre-execute`` or
    ``tools/post-execute`` listener, the approval service) raised:
    ``POLICY_FAILED`` with ``<where>: <its message>`` (named as
    :func:`thrown_text` names it: ``tools/pre-execute: SystemExit: 2
    (sys.exit() was called: ...)``), since the tool did nothing wrong. An
    :class:`AbortError` (the call's signal fired while a policy waited) and
    a :class:`ToolPolicyError` keep their own code and message."""
    if isinstance(exc, (AbortError, ToolPolicyError)):
        return failure_from_exception(exc, additional_contexts)
    detail = dsh_message(exc) if isinstance(exc, DshError) else thrown_text(exc)
    problem = ToolPolicyError(where, detail or type(exc).__name__)
    problem.__cause__ = exc
    return failure_from_exception(problem, additional_contexts)


def aborted(*, before_dispatch: bool, additional_contexts: tuple[UserMessage, ...] = ()) -> ToolExecutionFailure:
    """``ABORTED`` (the body was invoked) or ``ABORTED_BEFORE_DISPATCH``."""
    return failure_from_exception(AbortError(before_dispatch=before_dispatch), additional_contexts)


def is_result(value: object) -> bool:
    return type(value) is ToolExecutionSuccess or type(value) is ToolExecutionFailure


def render_success(
    execution: ToolExecution,
    definition: Any,
    output_validator: Any,
    value: Any,
    *,
    additional_contexts: tuple[UserMessage, ...] = (),
    concludes_turn: bool = False,
) -> ToolExecutionResult:
    """Validate a body's (or a policy's) value against the tool's output
    schema, freeze it, render it and compute presentation meta (root calls
    only). Any problem is an ``INVALID_TOOL_OUTPUT`` failure."""
    name = execution.name
    try:
        frozen = materialize(value)
    except LosslessJsonError as exc:
        return failure_from_exception(ToolOutputError(name, [exc.message]), additional_contexts, keep=True)
    violations = output_validator.validate(frozen)
    if violations:
        return failure_from_exception(ToolOutputError(name, violations), additional_contexts, keep=True)
    output = definition.output
    render = output.render
    if render is None:
        content: tuple[ContentBlock, ...] = (default_text(frozen),)
    else:
        try:
            rendered = render(execution.arguments, frozen)
        except BaseException as exc:  # noqa: BLE001 - a renderer may raise anything
            return _callback_failure(name, "output.render", f"raised {exception_text(exc)}", additional_contexts, exc)
        try:
            content = checked_content(rendered)
        except LosslessJsonError as exc:
            detail = _not_content(rendered, exc, _RENDER_UNSET)
            return _callback_failure(name, "output.render", detail, additional_contexts)
    meta = None
    if execution.parent is None and output.presentation_meta is not None:
        try:
            meta = presented_meta(name, output, execution.arguments, frozen)
        except ToolPolicyError as error:
            return _callback_failure(name, _META, error.detail, additional_contexts, error.__cause__)
    return _success(
        frozen,
        content,
        meta,
        additional_contexts if type(additional_contexts) is tuple else tuple(additional_contexts),
        concludes_turn,
    )


_META = "output.presentation_meta"


def presented_meta(name: str, output: Any, arguments: Any, value: Any) -> Any:
    """The presentation meta of tool ``name``'s call: ``output``'s
    ``presentation_meta(arguments, value)`` (the call's frozen arguments
    and value), materialized; ``None`` when the tool has none. What a root
    call's result carries, and what the session log's copy of a PTC
    sub-call carries (:func:`logged_meta`). Raises ``ToolPolicyError``
    naming the callback (``output.presentation_meta of tool "x": raised
    ...`` or ``returned ...``), what it raised as the error's
    ``__cause__``."""
    presenter = output.presentation_meta
    if presenter is None:
        return None
    try:
        shown = presenter(arguments, value)
    except BaseException as exc:  # noqa: BLE001 - a presenter may raise anything
        raise ToolPolicyError(f'{_META} of tool "{name}"', f"raised {exception_text(exc)}") from exc
    try:
        return materialize(shown, "meta")
    except LosslessJsonError as exc:
        raise ToolPolicyError(f'{_META} of tool "{name}"', f"returned {exc.message}") from None


def logged_meta(execution: ToolExecution, result: ToolExecutionResult) -> Any:
    """The presentation meta the session log's copy of ``execution``'s
    ``result`` carries: ``result.meta``; for a success of a call with a
    ``parent`` (a PTC sub-call: the pipeline computes presentation meta for
    root calls only, so its result has none), its tool's
    :func:`presented_meta` over the call's arguments and value, what the
    result of the same call made by the model carries, so a replay draws
    the same cards. Raises ``ToolPolicyError`` as :func:`presented_meta`
    does."""
    meta = result.meta
    definition = execution.definition
    if execution.parent is None or meta is not None or type(result) is not ToolExecutionSuccess or definition is None:
        return meta
    return presented_meta(execution.name, definition.output, execution.arguments, result.value)


# A success built field by field through the slot descriptors: what
# ``ToolExecutionSuccess(...)`` builds (its __post_init__ only turns content
# and contexts into tuples, which the caller passes already), in a quarter of
# the time.
_new_success = ToolExecutionSuccess.__new__
_set_value, _set_content, _set_meta, _set_contexts, _set_concludes = slot_setters(
    ToolExecutionSuccess, ("value", "content", "meta", "additional_contexts", "concludes_turn")
)


def _success(
    value: Any,
    content: tuple[ContentBlock, ...],
    meta: Any,
    additional_contexts: tuple[UserMessage, ...],
    concludes_turn: bool,
) -> ToolExecutionSuccess:
    result = _new_success(ToolExecutionSuccess)
    _set_value(result, value)
    _set_content(result, content)
    _set_meta(result, meta)
    _set_contexts(result, additional_contexts)
    _set_concludes(result, concludes_turn)
    return result


def content_from_hook(
    role: str, hook: Any, execution: ToolExecution, result: ToolExecutionResult
) -> tuple[ToolExecutionResult, bool]:
    """``result`` with its content replaced by what the content hook ``role``
    (``project_content``, ``finalize_content``) returns for it (``None``:
    ``result`` as it is), and ``False``. A hook that raises, or returns
    anything else than content blocks, fails the call as a broken
    ``render`` does (:func:`_callback_failure`; what the model reads says
    the tool ran only when ``result`` is a success): that failure, and
    ``True``. Never raises."""
    name = execution.name
    contexts = result.additional_contexts
    given = type(result) is not ToolExecutionSuccess
    try:
        replacement = hook(execution, result)
    except BaseException as exc:  # noqa: BLE001 - a content hook may raise anything; contain it
        detail = f"raised {exception_text(exc)}"
        return _callback_failure(name, role, detail, contexts, exc, given_failure=given), True
    if replacement is None:
        return result, False
    try:
        content = check_content(replacement)
    except LosslessJsonError as exc:
        detail = _not_content(replacement, exc, _KEEP_CONTENT)
        return _callback_failure(name, role, detail, contexts, given_failure=given), True
    except BaseException as exc:  # noqa: BLE001 - a hostile sequence
        detail = f"returned content that raised {exception_text(exc)} when read"
        return _callback_failure(name, role, detail, contexts, exc, given_failure=given), True
    return replace(result, content=content), False


def _callback_failure(
    name: str,
    role: str,
    detail: str,
    additional_contexts: tuple[UserMessage, ...],
    cause: BaseException | None = None,
    *,
    given_failure: bool = False,
) -> ToolExecutionFailure:
    """A tool's output callback (``render``, ``presentation_meta``, a
    content hook) broke its contract: ``POLICY_FAILED``, the message naming
    the callback (``output.render of tool "x": ...``), not the value it was
    given. What the callback raised stays as the error's ``__cause__`` (so
    on ``outcome.error.exception``). The message and its fix are the
    developer's (``error.message``, the log): the model reads only that the
    tool ran and its output could not be rendered (or, for a callback
    ``given_failure``, that the call failed and its error could not be
    rendered)."""
    error: DshError = ToolPolicyError(f'{role} of tool "{name}"', detail)
    if cause is not None:
        error = caused(error, cause)
    failed = failure_from_exception(error, additional_contexts)
    if given_failure:
        shown = f'Error: tool "{name}" failed, and its error could not be rendered: {_NOT_THE_CALL}'
    else:
        shown = f'Error: tool "{name}" ran, but its output could not be rendered: {_NOT_THE_CALL}'
    return replace(failed, content=(TextBlock(shown),))


_NOT_THE_CALL = "a fault in the tool, not in the call"
# What a callback that returned something else than content blocks is told.
_RENDER_UNSET = "leave render unset to send a str value as it is and any other value as JSON text"
_KEEP_CONTENT = "return None to keep the content as it is"


def _not_content(rendered: object, exc: LosslessJsonError, fix: str) -> str:
    if not isinstance(rendered, (list, tuple)):
        return (
            f"returned {_a(type(rendered).__qualname__)}, not a list of content blocks (TextBlock, ImageBlock, "
            f"ReasoningBlock); {fix}"
        )
    return f"returned {exc.message}"


def _a(word: str) -> str:
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


def _freeze_contexts(contexts: Any) -> tuple[UserMessage, ...]:
    out: list[UserMessage] = []
    for i, ctx in enumerate(tuple(contexts)):
        where = f"additional_contexts[{i}]"
        if type(ctx) is not UserMessage:
            raise LosslessJsonError(where, f"{type(ctx).__qualname__} is not a UserMessage")
        content = check_content(ctx.content, f"{where}.content")
        if ctx.source is not None and type(ctx.source) is not str:
            raise LosslessJsonError(f"{where}.source", "must be a str")
        meta = materialize(ctx.meta, f"{where}.meta")
        out.append(UserMessage(content, ctx.source, meta))
    return tuple(out)


def _freeze_error(error: Any) -> ToolFailure:
    """``error`` checked, its text with lone surrogates escaped as
    :func:`failure` escapes them (a wrapper may build a ``ToolFailure``
    itself): the same object when nothing needed escaping."""
    if type(error) is not ToolFailure:
        raise LosslessJsonError("error", f"{type(error).__qualname__} is not a ToolFailure")
    if type(error.message) is not str:
        raise LosslessJsonError("error.message", "must be a str")
    message = utf8_text(error.message)
    info = error.info
    if info is not None:
        if type(info) is not ToolErrorInfo:
            raise LosslessJsonError("error.info", f"{type(info).__qualname__} is not a ToolErrorInfo")
        for field in ("name", "code"):
            if type(getattr(info, field)) is not str:
                raise LosslessJsonError(f"error.info.{field}", "must be a str")
        reason = info.reason
        if reason is not None and type(reason) is not str:
            raise LosslessJsonError("error.info.reason", "must be a str")
        name, code = utf8_text(info.name), utf8_text(info.code)
        reason = None if reason is None else utf8_text(reason)
        if name is not info.name or code is not info.code or reason is not info.reason:
            info = ToolErrorInfo(name, code, reason)
    if message is error.message and info is error.info:
        return error
    return ToolFailure(message, info, error.exception)


def checked_content(blocks: object) -> tuple[ContentBlock, ...]:
    """:func:`~dsh_actors.model.check_content` with a fast path for what
    renders almost always return: a list or tuple of :class:`TextBlock` with
    ASCII text (valid by construction, so only the tuple is built). Anything
    else goes through ``check_content``, which names the first bad block."""
    kind = type(blocks)
    if kind is tuple or kind is list:
        for block in blocks:  # type: ignore[attr-defined]
            if type(block) is not TextBlock:
                break
            text = block.text
            if type(text) is not str or not text.isascii():
                break
        else:
            return blocks if kind is tuple else tuple(blocks)  # type: ignore[return-value,arg-type]
    return check_content(blocks)


def freeze_result(result: ToolExecutionResult) -> ToolExecutionResult:
    """Check and deep-freeze every field of a candidate result, or raise
    :class:`LosslessJsonError` naming the first bad field (a lone surrogate
    in a failure's ``error`` text is escaped instead, as :func:`failure`
    escapes it).

    A result whose every field is frozen already is returned as it is (the
    usual case: the pipeline built it from frozen parts), so the final freeze
    costs a check, not a copy."""
    content: tuple[ContentBlock, ...] = checked_content(result.content)
    meta = materialize(result.meta, "meta")
    given = result.additional_contexts
    contexts = () if type(given) is tuple and not given else _freeze_contexts(given)
    same = content is result.content and meta is result.meta and contexts is given
    if type(result) is ToolExecutionSuccess:
        value = materialize(result.value)
        concludes = result.concludes_turn
        if same and value is result.value and (concludes is True or concludes is False):
            return result
        return replace(
            result,
            value=value,
            content=content,
            meta=meta,
            additional_contexts=contexts,
            concludes_turn=concludes is True,
        )
    error = _freeze_error(result.error)
    if same and error is result.error and type(result) is ToolExecutionFailure:
        return result
    return ToolExecutionFailure(error=error, content=content, meta=meta, additional_contexts=contexts)
