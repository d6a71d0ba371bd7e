"""Batch intake: what a batch and its calls must be before anything runs,
and what the log records of arguments that did not materialize."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

import orjson

from ..errors import InvalidTypeError, InvalidValueError, LosslessJsonError, safe_repr, safe_str
from ..execution import CALL_DEPS
from ..json import loads, materialize, path_for_index, path_for_key
from ..model import Agent, LogStep, ToolBatchInput, ToolCall, _check_str
from ..signals import AbortSignal
from ..toolset import ResolvedToolSet
from ..visibility import RegistryState
from .call import BadArguments

__all__ = ["bind_context", "check_batch", "check_limit", "loggable", "parse_arguments"]


#: The largest concurrency limit: a 64-bit signed int, what the session
#: log (lossless JSON) and any count of threads can hold.
MAX_LIMIT: Final = 2**63 - 1


def check_limit(limit: object, what: str = "max_parallel_tool_calls") -> int:
    """A concurrency limit must be a positive int (``bool`` is not), at
    most :data:`MAX_LIMIT`."""
    if type(limit) is not int or limit < 1:
        raise InvalidValueError(f"{what} must be a positive integer, got {safe_str(repr(limit))}")
    if limit > MAX_LIMIT:
        raise InvalidValueError(f"{what} must be at most 2**63-1, got {limit:.3g}")
    return limit


#: ASCII digits (JSON's only) as ``0``, to find a run of 19 with one
#: ``bytes.find`` (16 KB of text: 16 µs, where ``re``'s ``\d{19}``, tried at
#: every character, took 250 µs).
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"0123456789", b"0" * 10)
_NINETEEN_DIGITS: Final = b"0" * 19


def parse_arguments(raw: object) -> Any:
    """Raw model arguments: JSON text is parsed (empty text means ``{}``);
    text that is not JSON, or whose JSON is a string, is kept as the raw
    string, so a ``str`` argument is always the text the model sent (the
    tool's validation then fails it with ``INVALID_ARGS``, saying what is
    wrong with the JSON and where); JSON that is not lossless (an integer
    out of range, a lone surrogate, an object that gives a key twice: which
    value is meant is unknown) gives :class:`BadArguments`; anything else
    is passed on as is (and materialized by the pipeline)."""
    if type(raw) is not str:
        return raw
    if raw.strip() == "":
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    if type(value) is str:
        return raw  # a JSON string ('"{\"a\": 1}"', arguments encoded twice): the text as sent
    # Hot path: orjson keeps a repeated key's last value, silently. Every
    # key is followed by a colon, so text with no more colons than the
    # object has keys repeats none (one count, in C). Other text is read
    # again only if it may repeat one: a quote in JSON text delimits a
    # string or, escaped as \", is a character of one, and orjson writes
    # the value back with the same strings, a quote in them as \". So text
    # that writes no quote as \u0022 has as many quotes as orjson's text
    # for its value unless it holds a string the value does not: a key
    # given again, and what it gave first (two more counts in C, any depth).
    if type(value) is dict and raw.count(":") > len(value):
        try:
            kept = orjson.dumps(value).count(b'"')
        except orjson.JSONEncodeError:  # nested deeper than orjson writes
            kept = -1
        if kept != raw.count('"') or "\\u0022" in raw:
            repeated = _repeated_key(raw)
            if repeated is not None:
                return BadArguments(repeated)
    if raw.encode("utf-8", "surrogatepass").translate(_DIGITS_AS_ZERO).find(_NINETEEN_DIGITS) >= 0:
        # orjson reads integer literals beyond 64 bits as floats: text with
        # 19 digits in a row is re-read with the lossless loader, which
        # rejects them.
        try:
            return loads(raw, frozen=False, path="arguments")
        except LosslessJsonError as exc:
            return BadArguments(exc)
    return value


def _repeated_key(raw: str) -> LosslessJsonError | None:
    """A key that an object of the JSON text ``raw`` gives more than once
    (the first such object's, in the text's order), as the problem at its
    path; None when there is none."""
    try:
        parsed = json.loads(raw, object_pairs_hook=_object)
    except (ValueError, RecursionError):  # (orjson parsed it; nesting too deep for the stdlib is refused later)
        return None
    stack: list[tuple[Any, str]] = [(parsed, "arguments")]
    while stack:
        item, path = stack.pop()
        if type(item) is _Repeated:
            return LosslessJsonError(
                path_for_key(path, item.key), "the key appears more than once in its object: send each key once"
            )
        if isinstance(item, dict):
            stack.extend((child, path_for_key(path, key)) for key, child in reversed(item.items()))
        elif type(item) is list:
            stack.extend((item[i], path_for_index(path, i)) for i in range(len(item) - 1, -1, -1))
    return None


class _Repeated(dict[str, Any]):
    """An object of the text that gives ``key`` more than once."""

    __slots__ = ("key",)

    key: str


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the JSON text, from its ``(key, value)`` pairs in order:
    a :class:`_Repeated` when a key comes twice."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            repeated = _Repeated(pairs)
            repeated.key = key
            return repeated
        seen.add(key)
    return dict(pairs)


def check_batch(batch: ToolBatchInput, state: RegistryState | None = None) -> None:
    """Reject a malformed batch before anything runs or is logged (a clear
    TypeError or ValueError naming the field): a field of the wrong type, a
    ``log`` without an agent (an agent whose ``session`` is None is logged
    nowhere: the session, not the batch, opts an agent in), a call that
    is not a :class:`ToolCall` or whose id or name is not valid text, and
    two calls with the same id (results, events and the log pair by id).
    ``state``: the registry of the runtime that runs it, which a
    ``tool_set`` must have been resolved by (None: not checked)."""
    for field, kind in _BATCH_FIELD_KINDS:
        value = getattr(batch, field)
        if value is not None and not isinstance(value, kind):
            raise InvalidTypeError(
                f"ToolBatchInput.{field} must be {_article(kind.__name__)} {kind.__name__} or None, got "
                f"{type(value).__qualname__}"
                + (
                    ": pass its .signal"
                    if field == "signal" and isinstance(getattr(value, "signal", None), kind)
                    else ""
                )
            )
    tool_set = batch.tool_set
    if tool_set is not None:
        tool_set.check_usable(
            batch.agent,
            "ToolBatchInput.tool_set",
            "the batch runs as",
            "resolve the set for the batch's agent (rt.tools.resolve(ToolActivationContext(agent=..., ...)))",
            state=state,
        )
    log = batch.log
    if log is not None:
        if batch.agent is None:
            raise InvalidValueError(
                "ToolBatchInput.log needs an agent: the log is written to agent.session "
                "(pass agent=Agent(..., session=Session()), or leave log=None)"
            )
        if type(log.turn) is not int or type(log.step) is not int:
            raise InvalidTypeError(
                f"ToolBatchInput.log's turn and step must be ints, got LogStep(turn={safe_repr(log.turn)}, "
                f"step={safe_repr(log.step)})"
            )
    calls = batch.calls
    for i, call in enumerate(calls):
        if type(call) is not ToolCall:
            raise InvalidTypeError(_not_a_call(calls, i))
        call_id = call.id
        name = call.name
        if type(call_id) is not str or type(name) is not str:
            raise InvalidTypeError(f"calls[{i}]: a ToolCall's id and name must be str")
        # Hot path (once per call): ASCII text is valid UTF-8, so only
        # other text pays for the check (and for its path).
        if not (call_id.isascii() and name.isascii()):
            try:
                _check_str(call_id, f"calls[{i}].id")
                _check_str(name, f"calls[{i}].name")
            except LosslessJsonError as exc:
                raise InvalidValueError(exc.message) from None
    if len(calls) > 1 and len({call.id for call in calls}) != len(calls):
        _refuse_duplicate_ids(calls)


#: The provider adapters (``dsh_actors.providers``), by what each converts:
#: its ``calls(...)`` takes a whole response, its message, or its tool calls.
_ADAPTERS: Final = {
    "openai": "the completion, its message or message.tool_calls",
    "openai_responses": "the response, its output or one function_call item",
    "anthropic": "the message, its content or one tool_use block",
}


def _not_a_call(calls: Sequence[Any], i: int) -> str:
    """Why ``calls[i]`` is refused, naming the fix: the provider adapter
    that converts it when it is an SDK's call (known by its module, no SDK
    imported), a provider's call as a dict, or an SDK response or message
    passed as ``calls`` itself (iterating a pydantic object gives its
    ``(field, value)`` pairs); else how to make a :class:`ToolCall`."""
    call = calls[i]
    make = "make each call with ToolCall(id=..., name=..., arguments=...)"
    pairs = _provider_of_pairs(calls)
    if pairs is not None:
        return (
            f"calls is a model response or message, not a list of ToolCall (calls[{i}] is one of its "
            f"(field, value) pairs): convert it with dsh_actors.providers.{pairs}.calls(...), "
            f"which takes {_ADAPTERS[pairs]}"
        )
    head = f"calls[{i}] is a {type(call).__qualname__}, not a ToolCall"
    provider = _provider_of_call(call)
    if provider is not None:
        return (
            f"{head}: convert the model's calls with dsh_actors.providers.{provider}.calls(...), "
            f"which takes {_ADAPTERS[provider]}; or {make}"
        )
    return (
        f"{head}: {make}, or convert a model response with the calls(...) of its provider's adapter in "
        "dsh_actors.providers (openai, openai_responses or anthropic)"
    )


def _provider_of_call(call: object) -> str | None:
    """The adapter of a provider's tool call: an SDK object, by its module
    and class, or a dict, by its shape."""
    if isinstance(call, dict):
        kind = call.get("type")
        if kind == "function_call":
            return "openai_responses"
        if kind == "tool_use":
            return "anthropic"
        return "openai" if kind == "function" or "function" in call else None
    module = type(call).__module__ or ""
    if module.startswith("openai.types.responses."):
        return "openai_responses"
    if module.startswith("openai."):
        return "openai"
    return "anthropic" if module.startswith("anthropic.") else None


def _provider_of_pairs(calls: Sequence[Any]) -> str | None:
    """The adapter for ``calls`` made of an SDK object's ``(field, value)``
    pairs (what ``tuple(message)`` gives), by its fields; None for anything
    else."""
    if not all(type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str for pair in calls):
        return None
    fields = {pair[0] for pair in calls}
    if "output" in fields:
        return "openai_responses"
    if "stop_reason" in fields:
        return "anthropic"
    return "openai" if fields & {"choices", "message", "tool_calls"} else None


def _refuse_duplicate_ids(calls: Sequence[ToolCall]) -> None:
    first: dict[str, int] = {}
    for i, call in enumerate(calls):
        earlier = first.setdefault(call.id, i)
        if earlier != i:
            shown = safe_repr(call.id)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            raise InvalidValueError(
                f"calls[{i}] has the id {shown} of calls[{earlier}]: call ids must be unique "
                "within a batch (results and the session log pair each call with its result by id)"
            )


_BATCH_FIELD_KINDS: tuple[tuple[str, type], ...] = (
    ("signal", AbortSignal),
    ("agent", Agent),
    ("tool_set", ResolvedToolSet),
    ("log", LogStep),
    ("context", contextvars.Context),
)


def bind_context(
    batch: ToolBatchInput, current: contextvars.Context | None = None, signal: AbortSignal | None = None
) -> ToolBatchInput:
    """``batch`` with the context its hooks run in (each call in a copy of
    it) and its deps settled, when the batch is submitted: its own
    ``context`` (copied) or ``current`` (a copy of the submitter's, taken
    on the submitting thread), and its own ``deps`` or, when None, the
    enclosing call's (a batch submitted from a tool body), which the
    context then carries for batches nested further. ``signal``: replaces
    the batch's (in the same copy)."""
    base = batch.context.copy() if batch.context is not None else current
    if base is None:
        base = contextvars.copy_context()
    deps = batch.deps
    if deps is None:
        deps = base.get(CALL_DEPS)
    elif base.get(CALL_DEPS) is not deps:
        base.run(CALL_DEPS.set, deps)
    if signal is not None:
        return replace(batch, context=base, deps=deps, signal=signal)
    return replace(batch, context=base, deps=deps)


def batch_arguments(raw: object) -> Any:
    """What ``tool/batch`` records for a call's arguments: JSON text as the
    model sent it (so a recovery parses exactly what the batch parsed), a
    mapping as lossless JSON, or, for either that is not lossless, a
    readable stand-in (text that is not JSON)."""
    try:
        return materialize(raw, "arguments")
    except LosslessJsonError as exc:
        return stand_in(exc)


def stand_in(problem: LosslessJsonError) -> str:
    """What a log records for arguments that are not lossless JSON: a
    readable text saying why. Not JSON text either, so parsed again it fails
    INVALID_ARGS as the call did (a lone surrogate must not become a valid
    "\ufffd")."""
    return f"<arguments that are not lossless JSON: {problem.message}>"


def loggable(raw: object) -> Any:
    """What ``tool/call`` records for arguments that did not materialize."""
    if type(raw) is str:
        try:
            return materialize(raw)
        except LosslessJsonError:  # a lone surrogate: keep the rest readable
            return raw.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if type(raw) is BadArguments:
        return stand_in(raw.error)
    return batch_arguments(raw)  # (the stand-in: they did not materialize)


def _article(word: str) -> str:
    return "an" if word[:1] in "AEIOU" else "a"
