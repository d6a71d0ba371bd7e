"""What the three wire formats share: reading SDK objects or dicts with a
path for every error, the result list, and content helpers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel

from ..errors import InvalidStateError, InvalidTypeError, InvalidValueError, printable, safe_repr, safe_str
from ..executor_protocol import ToolModelInput
from ..model import (
    ContentBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolBatchResult,
    ToolCall,
    ToolExecutionFailure,
    ToolExecutionSuccess,
)
from ..registry.service import ToolsService
from ..schema import strict_json_schema

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Agent
    from ..toolset import ResolvedToolSet

__all__ = ["IMAGE_TYPES", "ProviderFormatError", "Results"]

IMAGE_TYPES: Final = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image types all three providers accept (an image's media type is
compared without its parameters, its type and subtype in any case); an
image of another type reaches the model as a text note saying it was left
out."""


class ProviderFormatError(InvalidValueError):
    """A response (or part of one) that is not in the shape the module
    reads (a :class:`DshError` that is also a ``ValueError``). ``path`` says where (``response.choices[0].message.tool_calls[1]
    .function``), ``problem`` what is wrong; the message is ``path: problem``,
    one line."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


# Public as dsh_actors.providers.ProviderFormatError: tracebacks name that path, not this private module.
ProviderFormatError.__module__ = "dsh_actors.providers"


class Results(list[dict[str, Any]]):
    """What ``results(batch)`` returns: the provider's input for the next
    request (a plain ``list`` of plain dicts, to ``extend`` the conversation
    with), plus whether the batch concluded the agent's turn.

    ``concluded`` is ``batch.concluded``: a tool called
    ``ctx.conclude_turn()`` and succeeded. The messages still belong in the
    conversation (every call needs its result), but the loop should stop
    asking the model and hand the turn back to the user. ``concluded_by``
    holds the ids of the calls that concluded it, in model order.
    """

    __slots__ = ("concluded", "concluded_by")

    def __init__(
        self, items: Iterable[dict[str, Any]] = (), *, concluded: bool = False, concluded_by: Sequence[str] = ()
    ) -> None:
        super().__init__(items)
        self.concluded = concluded
        self.concluded_by = tuple(concluded_by)

    def __repr__(self) -> str:
        return f"Results({list.__repr__(self)}, concluded={self.concluded!r})"


# -- reading responses ------------------------------------------------------


def kind(value: object) -> str:
    """What ``value`` is, for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__qualname__


def shown(value: Any) -> str:
    """A value the response holds where a name belongs, for an error
    message: a string quoted (at most 60 characters), anything else by
    :func:`kind`."""
    return safe_repr(value)[:60] if type(value) is str else kind(value)


def quoted(text: str) -> str:
    """An id the response holds, for an error message: in double quotes,
    its control and format characters escaped (:func:`~dsh_actors.printable`,
    no Python repr), cut to 60 characters."""
    return f'"{printable(text if len(text) <= 60 else text[:57] + "...")}"'


CHAT_KEYS: Final = ("tool_calls", "function_call", "refusal")
"""Keys of a Chat Completions message that an Anthropic message or a
Responses API item never has."""


def plain(value: Any, where: str) -> Any:
    """An SDK object (anything with ``model_dump()``) as its dict; anything
    else as it is. Only this level is converted: the reader converts each
    level it descends into. An object whose ``model_dump()`` raises is a
    :class:`ProviderFormatError` at ``where``, like any other shape the
    reader cannot read."""
    if value is None or isinstance(value, (Mapping, str, bytes, list, tuple, int, float)):
        return value
    try:
        if isinstance(value, BaseModel):
            # (warnings=False: an object built with model_construct, or
            # holding dicts where the SDK declares its models, dumps what it
            # holds, and pydantic would print a warning for each such field.
            # What the reader cannot read is a ProviderFormatError.)
            return value.model_dump(warnings=False)
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            return dump()
    except Exception as err:  # noqa: BLE001 - a broken SDK object is a format error, not a crash
        lines = safe_str(err).splitlines()
        said = f" ({lines[0][:200]})" if lines else ""
        raise ProviderFormatError(
            where,
            f"{type(value).__qualname__}.model_dump() raised {type(err).__qualname__}{said}: "
            "pass the object the SDK returned, or a dict",
        ) from err
    return value


def mapping_or_none(value: Any, where: str) -> Mapping[str, Any] | None:
    value = plain(value, where)
    return value if isinstance(value, Mapping) else None


def sequence_or_none(value: Any, where: str) -> Sequence[Any] | None:
    value = plain(value, where)
    return value if isinstance(value, (list, tuple)) else None


class Reader:
    """One response's read: the calls in model order, where each was read
    (to name both places of a duplicate id), and errors that name the path
    of the bad field."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.places: dict[str, str] = {}  # call id -> where it was read

    def fail(self, where: str, problem: str) -> ProviderFormatError:
        return ProviderFormatError(where, problem)

    def obj(self, value: Any, where: str) -> Mapping[str, Any]:
        found = mapping_or_none(value, where)
        if found is None:
            raise self.fail(where, f"must be an object, got {kind(value)}")
        return found

    def items(self, value: Any, where: str) -> Sequence[Any]:
        found = sequence_or_none(value, where)
        if found is None:
            raise self.fail(where, f"must be a list, got {kind(value)}")
        return found

    def text(self, data: Mapping[str, Any], key: str, where: str) -> str:
        if key not in data:
            raise self.fail(where, f"missing {key!r}")
        value = data[key]
        if type(value) is not str or not value:
            raise self.fail(f"{where}.{key}", f"must be a non-empty string, got {kind(value)}")
        if not value.isascii():
            # A batch refuses such an id or name whole (it is not lossless
            # JSON): say where it came from instead.
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as err:
                raise self.fail(
                    f"{where}.{key}", f"holds a lone surrogate (U+{ord(value[err.start]):04X} at index {err.start})"
                ) from None
        return value

    def assistant(self, role: object, where: str) -> None:
        """``role`` (read at ``where``) is an assistant message's: another
        role is named, anything else (null) is not a role."""
        if role == "assistant":
            return
        if type(role) is str:
            raise self.fail(where, f"a {safe_repr(role)} message holds no tool calls; pass the assistant message")
        raise self.fail(where, f'must be "assistant", got {kind(role)}')

    def add(self, call_id: str, name: str, arguments: Any, where: str, key: str) -> None:
        arguments = plain(arguments, f"{where}.{key}")
        if arguments is None:
            arguments = ""
        if not isinstance(arguments, (str, Mapping)):
            raise self.fail(f"{where}.{key}", f"must be an object or JSON text, got {kind(arguments)}")
        place = self.places.get(call_id)
        if place is not None:
            raise self.fail(
                where,
                f"duplicate call id {quoted(call_id)} (also the id of {place}): the model gave two tool calls one "
                "id, and each result is paired with its call by id, so none is run; ask the model again (send the "
                "same request) for calls with distinct ids",
            )
        self.calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        self.places[call_id] = where

    def done(self, cut: CutOff | None = None) -> tuple[ToolCall, ...]:
        """The calls read. ``cut``: the response says its output was cut off
        or stopped early (:func:`cut_off`): with a call in it, that call's
        arguments may be cut short (a stream accumulator completes partial
        JSON, or the text ends mid-value), so none is run, whichever
        provider."""
        if cut is not None and self.calls:
            at, stopped, fix = cut
            raise self.fail(
                at, f"{stopped} with a tool call in it: its arguments may be cut short, so no call is run; {fix}"
            )
        return tuple(self.calls)


#: Where a response says it was cut off, how it stopped, what to do.
CutOff = tuple[str, str, str]


def cut_off(table: Mapping[str, tuple[str, str]], reason: object, at: str) -> CutOff | None:
    """``reason`` (a stop or finish reason the response gave at ``at``) as
    a :data:`CutOff` when ``table`` (an adapter's ``CUT_OFF``: how it
    stopped, what to do) names it, else None (for :meth:`Reader.done`)."""
    found = table.get(reason) if type(reason) is str else None
    return None if found is None else (at, *found)


# -- writing results ----------------------------------------------------------


def check_batch_result(batch_result: object, fn: str) -> ToolBatchResult:
    if not isinstance(batch_result, ToolBatchResult):
        raise InvalidTypeError(
            f"{fn}() takes the ToolBatchResult that rt.tools.execute(...) returned, "
            f"not {type(batch_result).__qualname__}"
        )
    pending = batch_result.pending
    if pending:
        # The provider's next request needs every call's result: these
        # messages would miss some, and the provider refuse them.
        shown = ", ".join(repr(call_id) for call_id in pending[:5]) + (", ..." if len(pending) > 5 else "")
        raise InvalidStateError(
            f"{fn}() takes a complete batch: this one suspended with call(s) {shown} still open (waiting for an approval, or behind one); "
            "resume it (rt.tools.resume(batch.suspension, decisions, agent=agent), with the agent the batch ran for) "
            "and pass the batch that returns"
        )
    return batch_result


def model_content(call_id: str, result: object) -> tuple[ContentBlock, ...]:
    """The content the model reads for one result; a failure whose content
    a policy emptied still says it failed (``Error: <message>``)."""
    if isinstance(result, ToolExecutionFailure):
        if result.content:
            return result.content
        return (TextBlock(f"Error: {result.error.message}"),)
    if isinstance(result, ToolExecutionSuccess):
        return result.content
    raise InvalidTypeError(
        f"the result of call {call_id!r} is a {type(result).__qualname__}, not a tool execution result"
    )


def is_error(result: object) -> bool:
    return isinstance(result, ToolExecutionFailure)


def block_kind(call: str, block: object) -> type:
    t = type(block)
    if t not in (TextBlock, ImageBlock, ReasoningBlock):
        raise InvalidTypeError(
            f"{call}: {t.__qualname__} is not a content block (TextBlock, ImageBlock, ReasoningBlock)"
        )
    return t


def image_type(block: ImageBlock) -> str | None:
    """The block's media type as the providers spell it, bare (type and
    subtype in lower case, without parameters: ``Image/PNG; name=x`` is
    ``image/png``), or ``None`` when they do not accept it (``image/jpg``
    is read as ``image/jpeg``)."""
    mime = block.mime_type.split(";", 1)[0].strip().lower()
    if mime == "image/jpg":
        mime = "image/jpeg"
    return mime if mime in IMAGE_TYPES else None


def data_url(block: ImageBlock, mime: str) -> str:
    return f"data:{mime};base64,{block.data}"


def image_left_out(block: ImageBlock, provider: str, why: str = "") -> str:
    """The note that stands for an image a request leaves out: by default,
    one of a type ``provider`` does not accept; ``why`` says another reason."""
    if not why:
        why = f"{provider} accepts {', '.join(IMAGE_TYPES)}"
    return f"[an image of type {block.mime_type} was left out: {why}]"


def kept(text: str, *, whitespace: bool = True) -> bool:
    """Whether a text (or reasoning) block's ``text`` is sent: empty text
    never is, in a result or an additional context (a context left with
    nothing is not sent), and whitespace-only text only where
    ``whitespace`` (Anthropic refuses it)."""
    return bool(text) and (whitespace or not text.isspace())


def concluded_by(batch: ToolBatchResult) -> tuple[str, ...]:
    return tuple(
        item.call_id
        for item in batch.results
        if isinstance(item.result, ToolExecutionSuccess) and item.result.concludes_turn
    )


def results_of(batch: ToolBatchResult, items: Iterable[dict[str, Any]]) -> Results:
    return Results(items, concluded=batch.concluded, concluded_by=concluded_by(batch))


# -- tools ------------------------------------------------------------------


def model_input(rt: Any, agent: Agent | None, tool_set: ResolvedToolSet | None) -> ToolModelInput:
    """``rt.tools.model_tools(agent, tool_set)``; ``rt`` is a ToolRuntime
    or a ToolsService (``rt.tools.scope(agent)``)."""
    service = rt if isinstance(rt, ToolsService) else getattr(rt, "tools", None)
    if not isinstance(service, ToolsService):
        raise InvalidTypeError(f"tools() takes a ToolRuntime (or its rt.tools), not {type(rt).__qualname__}")
    return service.model_tools(agent, tool_set)


def check_strict(strict: object, fn: str) -> bool:
    """``strict`` as given, when it is a bool (``"false"`` is truthy: it
    would ask for strict function calling)."""
    if type(strict) is not bool:
        raise InvalidTypeError(f"{fn}(strict=...) takes True or False, not {type(strict).__qualname__}")
    return strict


def strict_parameters(parameters: Any) -> tuple[Any, bool]:
    """``parameters`` in OpenAI's strict form and ``True``, or as they are
    and ``False`` when they cannot be made strict."""
    strict = strict_json_schema(parameters)
    return (parameters, False) if strict is None else (strict, True)
