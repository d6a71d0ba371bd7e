"""The data model: content blocks, calls, batches, results, decisions.

Every record here is a frozen dataclass (slots; sequences are tuples) that
compares by value, except :class:`Agent`, which is a scope key and compares
by identity. Constructors normalise sequences to tuples, so a caller keeping
a reference to the list it passed cannot change a record afterwards.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from .errors import InvalidTypeError, InvalidValueError, LosslessJsonError, safe_str, utf8_text

if TYPE_CHECKING:  # pragma: no cover
    from .session import Session
    from .signals import AbortSignal
    from .toolset import ResolvedToolSet

__all__ = [
    "UNSET",
    "Accept",
    "Agent",
    "Allow",
    "ApprovalRequest",
    "Ask",
    "Block",
    "Cancel",
    "ContentBlock",
    "Deny",
    "ImageBlock",
    "LogStep",
    "ModelSelection",
    "PostToolDecision",
    "PreToolDecision",
    "ReasoningBlock",
    "TextBlock",
    "ToolActivationContext",
    "ToolBatchInput",
    "ToolBatchResult",
    "ToolCall",
    "ToolCallResult",
    "ToolErrorInfo",
    "ToolExecutionFailure",
    "ToolExecutionResult",
    "ToolExecutionSuccess",
    "ToolFailure",
    "ToolProgress",
    "ToolRestriction",
    "UserMessage",
    "content_from_json",
    "content_to_json",
    "is_text_by_language",
    "text",
]


class _Unset:
    """The type of :data:`UNSET`: "no value given" where ``None`` is a value."""

    __slots__ = ()
    #: What a value that holds UNSET is told (see ``dsh_actors.json._rules.value_problem``).
    _NOT_JSON: Final = "UNSET is not a value (it means none was given): return or pass the value itself; None is one"
    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()


# --------------------------------------------------------------------------
# Content blocks
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextBlock:
    """Plain text for the model."""

    text: str
    type: Literal["text"] = field(default="text", init=False, repr=False)


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """An image: base64 ``data`` of ``mime_type`` (``image/png``, ...).
    Both are checked as the block is made, naming the fix: ``mime_type``
    must be an image media type, ``image/<subtype>`` (the subtype's
    characters as RFC 6838 has them, ``image`` in any case, optionally
    ``;`` parameters), so an empty one, ``png`` or ``text/plain`` is
    refused; bytes, empty text, a data URL or other text that is not base64
    (standard alphabet, ``=`` padding, no line breaks) are refused as
    ``data`` (C loops: about 2 ms for a 1 MB image). A type the providers
    do not take (``image/svg+xml``) is kept: they leave the image out with
    a note. A block read back from a log is not checked again
    (:func:`content_from_json`)."""

    data: str
    mime_type: str
    type: Literal["image"] = field(default="image", init=False, repr=False)

    def __post_init__(self) -> None:
        # (Checked here, where the mistake is made: it used to surface as the
        # call's POLICY_FAILED render error, far from the fix.)
        data: Any = self.data
        if type(data) is not str:
            fix = f": {_ENCODE_FIX}" if isinstance(data, (bytes, bytearray, memoryview)) else ""
            raise InvalidTypeError(f"ImageBlock data is base64 text (a str), not {type(data).__qualname__}{fix}")
        if type(self.mime_type) is not str:
            raise InvalidTypeError(
                f"ImageBlock mime_type is a str such as 'image/png', not {type(self.mime_type).__qualname__}"
            )
        problem = _media_type_problem(self.mime_type, data)
        if problem is not None:
            raise InvalidValueError(f"ImageBlock mime_type {problem}")
        problem = _base64_problem(data)
        if problem is not None:
            raise InvalidValueError(f"ImageBlock data {problem}")


_ENCODE_FIX: Final = "base64-encode the bytes, ImageBlock(base64.b64encode(raw).decode(), mime_type)"
_BASE64_DIGITS: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


# ``image/<subtype>``: RFC 6838's restricted-name characters, then any
# parameters (``image/svg+xml; charset=utf-8``).
_IMAGE_MEDIA_TYPE: Final = re.compile(r"(?i:image)/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(?:[ \t]*;[^\r\n]*)?")
_SHOWN_CHARS: Final = 40


def _media_type_problem(mime_type: str, data: str) -> str | None:
    """What is wrong with ``mime_type`` as an image's media type, with the
    fix; ``None`` when nothing. ``data`` is looked at only to tell the
    arguments given the wrong way round (a media type as the data)."""
    if _IMAGE_MEDIA_TYPE.fullmatch(mime_type) is not None:
        return None
    if not mime_type:
        problem = "is empty"
    else:
        shown = mime_type if len(mime_type) <= _SHOWN_CHARS else f"{mime_type[:_SHOWN_CHARS]}..."
        problem = f"{shown!r} is not an image media type"
    if _IMAGE_MEDIA_TYPE.fullmatch(data) is not None:
        fix = "the arguments are the wrong way round, ImageBlock(data, mime_type)"
    elif "/" not in mime_type and _IMAGE_MEDIA_TYPE.fullmatch(f"image/{mime_type}") is not None:
        subtype = mime_type.lower()
        fix = f"give 'image/{'jpeg' if subtype == 'jpg' else subtype}'"
    else:
        fix = "give the image's type as 'image/<subtype>', such as 'image/png' or 'image/jpeg'"
    return f"{problem}: {fix}"


def _base64_problem(data: str) -> str | None:
    """What is wrong with ``data`` as an image's base64 text (the standard
    alphabet, padded with ``=`` to a multiple of 4 characters, no line
    breaks: what the providers take), with the fix; ``None`` when nothing.
    C loops only: no decoding, no copy but the ASCII bytes."""
    if data.isascii() and data:
        raw = data.encode("ascii")
        pad = 2 if raw.endswith(b"==") else 1 if raw.endswith(b"=") else 0
        if len(raw) % 4 == 0 and raw.find(b"=", 0, len(raw) - pad) < 0 and not raw.translate(None, _BASE64_DIGITS):
            return None
    if not data:
        return f"is empty: {_ENCODE_FIX}"
    if data[:5].lower() == "data:":
        return 'is a data URL, not base64 text: strip its "data:<type>;base64," prefix (the type goes in mime_type)'
    return (
        "is not base64 text (the standard alphabet A-Z a-z 0-9 + /, padded with = to a multiple of 4 "
        f"characters, no line breaks): {_ENCODE_FIX}"
    )


@dataclass(frozen=True, slots=True)
class ReasoningBlock:
    """Model reasoning carried through a conversation; ``signature`` is the
    provider's opaque integrity token, when it gives one."""

    text: str
    signature: str | None = None
    type: Literal["reasoning"] = field(default="reasoning", init=False, repr=False)


ContentBlock: TypeAlias = TextBlock | ImageBlock | ReasoningBlock
_BLOCK_TYPES: Final = (TextBlock, ImageBlock, ReasoningBlock)


def text(value: str) -> TextBlock:
    """``text("x") == TextBlock("x")``."""
    # Built through the slot descriptors (a frozen dataclass's __init__ goes
    # through object.__setattr__ per field): a call's default content, and
    # most renders', is one.
    block = _new_text(TextBlock)
    _set_text_text(block, value)
    _set_text_type(block, "text")
    return block


def _check_str(value: object, where: str) -> str:
    if type(value) is not str:
        raise LosslessJsonError(where, f"expected a str, got {type(value).__qualname__}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise LosslessJsonError(where, "str with a lone surrogate is not lossless JSON") from None
    return value


def check_content(blocks: object, path: str = "content") -> tuple[ContentBlock, ...]:
    """Return ``blocks`` as a tuple of well-formed content blocks, or raise
    :class:`LosslessJsonError` naming the first bad block."""
    if isinstance(blocks, (str, bytes)) or not isinstance(blocks, (list, tuple)):
        raise LosslessJsonError(path, f"content must be a list of content blocks, got {type(blocks).__qualname__}")
    out: list[ContentBlock] = []
    for i, block in enumerate(blocks):
        where = f"{path}[{i}]"
        kind = type(block)
        if kind is TextBlock:
            _check_str(block.text, f"{where}.text")
        elif kind is ImageBlock:
            _check_str(block.data, f"{where}.data")
            _check_str(block.mime_type, f"{where}.mime_type")
        elif kind is ReasoningBlock:
            _check_str(block.text, f"{where}.text")
            if block.signature is not None:
                _check_str(block.signature, f"{where}.signature")
        else:
            raise LosslessJsonError(
                where, f"{kind.__qualname__} is not a content block (TextBlock, ImageBlock, ReasoningBlock)"
            )
        out.append(block)
    return tuple(out)


def content_to_json(blocks: Iterable[ContentBlock]) -> list[dict[str, Any]]:
    """The durable JSON form of content blocks (``{"type": "text", "text": ...}``)."""
    out: list[dict[str, Any]] = []
    for block in blocks:
        if type(block) is TextBlock:
            out.append({"type": "text", "text": block.text})
        elif type(block) is ImageBlock:
            out.append({"type": "image", "data": block.data, "mime_type": block.mime_type})
        elif type(block) is ReasoningBlock:
            item: dict[str, Any] = {"type": "reasoning", "text": block.text}
            if block.signature is not None:
                item["signature"] = block.signature
            out.append(item)
        else:
            raise LosslessJsonError("content", f"{type(block).__qualname__} is not a content block")
    return out


def content_from_json(items: object, path: str = "content") -> tuple[ContentBlock, ...]:
    """Inverse of :func:`content_to_json`; raises :class:`LosslessJsonError`
    on anything that is not a logged content block. An image's ``data`` and
    ``mime_type`` are read back as logged, unchecked: a log written before
    :class:`ImageBlock` refused text that is not base64, or a type that is
    not ``image/<subtype>``, replays as it was sent."""
    if not isinstance(items, (list, tuple)):
        raise LosslessJsonError(path, "content must be a list")
    out: list[ContentBlock] = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise LosslessJsonError(where, "a content block must be an object")
        kind = item.get("type")
        if kind == "text":
            out.append(TextBlock(_check_str(item.get("text"), f"{where}.text")))
        elif kind == "image":
            out.append(
                _logged_image(
                    _check_str(item.get("data"), f"{where}.data"),
                    _check_str(item.get("mime_type"), f"{where}.mime_type"),
                )
            )
        elif kind == "reasoning":
            sig = item.get("signature")
            out.append(
                ReasoningBlock(
                    _check_str(item.get("text"), f"{where}.text"),
                    None if sig is None else _check_str(sig, f"{where}.signature"),
                )
            )
        else:
            raise LosslessJsonError(where, f"unknown content block type {safe_str(kind)!r}")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class UserMessage:
    """Context for the model's next request: ``content`` blocks, the plugin
    or tool that minted it (``source``) and lossless JSON ``meta``."""

    content: tuple[ContentBlock, ...]
    source: str | None = None
    meta: Any = None

    def __post_init__(self) -> None:
        content: Any = self.content
        if isinstance(content, (str, bytes)):
            raise InvalidTypeError("UserMessage.content is a sequence of content blocks, e.g. [text(...)]")
        object.__setattr__(self, "content", tuple(self.content))


# --------------------------------------------------------------------------
# Agents, steps and activation
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Agent:
    """A scope key: who is calling. ``parent`` makes scope chains (a
    sub-agent sees what its parent sees, narrowed by restrictions); a
    ``session`` receives the durable log of batches run with ``log``.

    Agents compare and hash by identity: two ``Agent("main")`` objects are
    two scopes. The runtime's caches refer to agents weakly, so an agent
    the application drops (with its session) is freed; one that registered
    or restricted tools stays in the registry until those are disposed.
    (An idle executor or call actor holds the last message it handled,
    and through it that batch's agent, until its next message or until it
    retires, half a second later.)
    """

    id: str
    parent: Agent | None = None
    session: Session | None = None

    def __post_init__(self) -> None:
        if type(self.id) is not str:
            raise InvalidTypeError(f"Agent(id) must be a str, not {type(self.id).__qualname__}")
        if self.parent is not None and not isinstance(self.parent, Agent):
            raise InvalidTypeError(f"Agent(parent=...) must be an Agent or None, not {type(self.parent).__qualname__}")

    def chain(self) -> tuple[Agent, ...]:
        """This agent and its ancestors, farthest first (root ... self)."""
        if self.parent is None:
            return (self,)  # (a root agent: the guards walk this per call)
        out: list[Agent] = []
        node: Agent | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return tuple(out)

    @property
    def path(self) -> str:
        """``root/child/self`` ids, for messages and logs."""
        return "/".join(a.id for a in self.chain())

    def __repr__(self) -> str:
        return f"Agent({self.path!r})"


@dataclass(frozen=True, slots=True)
class ModelSelection:
    """The model a step is prepared for."""

    provider: str
    model: str
    reasoning_effort: str | None = None


@dataclass(frozen=True, slots=True)
class ToolActivationContext:
    """What a ``when`` condition sees: the preparing agent, the captured
    model selection, and the step preparation's cancellation signal."""

    agent: Agent | None
    model_selection: ModelSelection
    signal: AbortSignal


@dataclass(frozen=True, slots=True)
class ToolRestriction:
    """One scope's filter over the tools it inherits. ``allow``: only these
    inherited names stay visible; ``deny``: these are removed. The names are
    copied at construction."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("allow", "deny"):
            names = getattr(self, name)
            if names is None:
                continue
            if isinstance(names, str):
                # A bare string would silently become its characters.
                raise InvalidTypeError(f"ToolRestriction.{name} must be a sequence of names, not a str")
            try:
                names = tuple(names)
            except TypeError:
                raise InvalidTypeError(
                    f"ToolRestriction.{name} must be a sequence of names, not {type(names).__qualname__}"
                ) from None
            object.__setattr__(self, name, names)


@dataclass(frozen=True, slots=True)
class LogStep:
    """The committed model step that receives root ``tool/call`` and
    ``tool/result`` events."""

    turn: int
    step: int


# --------------------------------------------------------------------------
# Calls and batches
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call as the model produced it. ``arguments`` is the raw JSON text
    from the model (empty text means ``{}``), or an already parsed mapping."""

    id: str
    name: str
    arguments: str | Mapping[str, Any] = ""


@dataclass(frozen=True, slots=True)
class ToolBatchInput:
    """A model response's tool calls, run as one batch.

    ``signal`` cancels the batch; ``max_parallel_tool_calls`` overrides the
    executor's limit for this batch (a positive int); ``agent`` supplies the
    scope (and its session for ``log``); ``tool_set`` is the step's admission;
    ``log`` is the model step receiving root call/result events.

    ``deps`` is any object the application hands the run (a database pool,
    the user): every call sees it as ``ctx.deps`` and ``execution.deps``. It
    is never logged, frozen or compared; ``None`` inherits the enclosing
    call's deps (a batch submitted from inside a tool body).

    ``context`` is the :class:`contextvars.Context` the batch's hooks run
    in (each call in its own copy); ``None``, the default, is the context
    current when the batch is submitted. Never compared.
    """

    calls: Sequence[ToolCall]  # (a list or tuple; kept as a tuple)
    signal: AbortSignal | None = None
    max_parallel_tool_calls: int | None = None
    agent: Agent | None = None
    tool_set: ResolvedToolSet | None = None
    log: LogStep | None = None
    deps: Any = field(default=None, compare=False, repr=False)
    context: contextvars.Context | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        calls: object = self.calls
        if type(calls) is not tuple:
            if isinstance(calls, (str, bytes, Mapping, ToolCall)) or not isinstance(calls, Iterable):
                raise InvalidTypeError(
                    f"ToolBatchInput.calls is a list (or tuple) of ToolCall, got {type(calls).__qualname__}"
                    + (": wrap the one call, calls=[ToolCall(...)]" if isinstance(calls, ToolCall) else "")
                )
            object.__setattr__(self, "calls", tuple(calls))


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """One progress report of a running call (the ``tools/progress``
    event): how far it is (``progress``), out of ``total`` when known, and
    an optional human ``message``."""

    progress: float
    total: float | None = None
    message: str | None = None


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolErrorInfo:
    """Structured identity of a failure: the error class ``name``, its
    ``code``, and an optional raw user-facing ``reason`` (kept in durable
    projections, never in model-facing content)."""

    name: str
    code: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ToolFailure:
    """Why a call failed: ``message`` has no ``Error: `` prefix. ``info``
    names the error: a :class:`~dsh_actors.errors.DshError`'s class and
    code, or for any other exception a tool body raised its class name and
    ``TOOL_FAILED`` (``ToolErrorInfo("FileNotFoundError", "TOOL_FAILED")``);
    it is None when whoever built the failure attached none (a ``Deny``
    without ``info``, a post-execute ``Block``).

    ``exception`` is the live exception a body, listener, wrapper, guard,
    approval service or renderer raised (with its ``__traceback__``), the
    ``ToolOutputError`` of a value that does not fit the output schema
    (its ``violations``: every one), or None. It lives only on the result in memory: it is never compared,
    never logged as an object and never shown to the model (the session log
    keeps its traceback as text in the ``tool/result`` event's
    ``traceback`` field)."""

    message: str
    info: ToolErrorInfo | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ToolExecutionSuccess:
    """A successful call: the canonical ``value`` (execution-local, never
    logged), the model-facing ``content``, presentation ``meta``, deferred
    contexts, and whether it concludes the agent's turn.

    In a result from the pipeline, ``value`` and ``meta`` are frozen
    (what :func:`~dsh_actors.json.materialize` returns): dicts are a read-only mapping
    equal to the same dict, but lists are tuples, so a body that returned
    ``{"a": [1]}`` gives a ``value`` that is not ``== {"a": [1]}``. Compare
    ``thaw(result.value)`` (plain dicts and lists) instead."""

    value: Any
    content: tuple[ContentBlock, ...]
    meta: Any = None
    additional_contexts: tuple[UserMessage, ...] = ()
    concludes_turn: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))
        object.__setattr__(self, "additional_contexts", tuple(self.additional_contexts))

    @property
    def is_error(self) -> Literal[False]:
        return False

    @property
    def error(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class ToolExecutionFailure:
    """A failed call: its ``error`` and the model-facing ``content``
    (``[TextBlock("Error: " + message)]`` unless a policy replaced it; a
    tool's failed ``render`` says only that its output could not be
    rendered)."""

    error: ToolFailure
    content: tuple[ContentBlock, ...]
    meta: Any = None
    additional_contexts: tuple[UserMessage, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))
        object.__setattr__(self, "additional_contexts", tuple(self.additional_contexts))

    @property
    def is_error(self) -> Literal[True]:
        return True

    @property
    def value(self) -> None:
        return None

    @property
    def concludes_turn(self) -> Literal[False]:
        return False

    @property
    def code(self) -> str | None:
        """The failure's code, when it has structured identity."""
        return None if self.error.info is None else self.error.info.code


ToolExecutionResult: TypeAlias = ToolExecutionSuccess | ToolExecutionFailure


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """One settled result correlated with its model call."""

    call_id: str
    result: ToolExecutionResult


@dataclass(frozen=True, slots=True)
class ToolBatchResult:
    """Model-ordered outcomes, the contexts accepted for the next step (after
    the last result), and whether a success concluded the turn.

    A batch that waits for deferred approvals has ``results`` for its
    settled calls only, ``pending``, the ids of the calls still open (model
    order), and ``suspension``, a plain JSON value that
    ``rt.tools.resume(suspension, decisions)`` finishes it from (in this
    process or another). A complete batch has ``pending == ()`` and
    ``suspension is None``."""

    results: tuple[ToolCallResult, ...]
    additional_contexts: tuple[UserMessage, ...] = ()
    concluded: bool = False
    pending: tuple[str, ...] = ()
    suspension: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(self.results))
        object.__setattr__(self, "additional_contexts", tuple(self.additional_contexts))
        object.__setattr__(self, "pending", tuple(self.pending))


# --------------------------------------------------------------------------
# Decisions (defined here, among the values they carry; their public home is
# dsh_actors.events, which re-exports these same objects)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Allow:
    """Pre-execute: run the call."""


@dataclass(frozen=True, slots=True)
class Deny:
    """Pre-execute: fail the call with ``reason`` as its message."""

    reason: str
    info: ToolErrorInfo | None = None

    def __post_init__(self) -> None:
        # (The model reads the reason: anything but text reached it as a Python repr.)
        if type(self.reason) is not str:
            raise InvalidTypeError(
                f"Deny(reason=...) is the text the model reads, a str, not {type(self.reason).__qualname__}"
            )


@dataclass(frozen=True, slots=True)
class Cancel:
    """Pre-execute: the canonical pre-dispatch cancellation result."""


def is_text_by_language(value: object) -> bool:
    """Whether ``value`` is what an ``Ask``'s ``display_reason`` holds: a
    mapping of language to text (``str`` keys and values). An ``"en"``
    entry is what a reader falls back on, but is not required: a suspension
    stored with another language alone still resumes."""
    return isinstance(value, Mapping) and all(type(k) is str and type(v) is str for k, v in value.items())


@dataclass(frozen=True, slots=True)
class Ask:
    """Pre-execute: run only if the approval service answers ``allowed-once``.
    ``reason`` is the audited reason, a ``str`` or ``None`` (anything else
    is refused as the decision is made: ``InvalidTypeError``);
    ``display_reason`` localized prompt
    text (``{"en": ..., "fr": ...}``; give an ``"en"`` entry). A ``str``
    given as ``display_reason`` is the English text: ``Ask(display_reason="Delete
    it?")`` holds ``{"en": "Delete it?"}``. A mapping is copied; anything else
    is refused as the decision is made (``InvalidTypeError``). A lone
    surrogate in the text (a file name ``os.fsdecode`` gave) is kept as its
    ``\\udcff`` escape, as a failure's message keeps it
    (:func:`~dsh_actors.errors.utf8_text`): the log and a suspension can
    hold it, an approval service can show it."""

    reason: str | None = None
    display_reason: Mapping[str, str] | str | None = None

    def __post_init__(self) -> None:
        reason: object = self.reason
        if type(reason) is str:
            if not reason.isascii():
                object.__setattr__(self, "reason", utf8_text(reason))
        elif reason is not None:
            # (The approval service, the log and a suspension read the reason:
            # anything but text reached them as a Python repr, or failed the
            # call only once it was deferred.)
            raise InvalidTypeError(
                f"Ask(reason=...) is the audited reason, a str or None, not {type(reason).__qualname__}"
            )
        shown: object = self.display_reason
        if shown is None:
            return
        if type(shown) is str:
            object.__setattr__(self, "display_reason", {"en": utf8_text(shown)})
        elif is_text_by_language(shown):
            texts = {utf8_text(k): utf8_text(v) for k, v in shown.items()}  # type: ignore[attr-defined]
            object.__setattr__(self, "display_reason", texts)
        else:
            got = (
                type(shown).__qualname__
                if not isinstance(shown, Mapping)
                else "a mapping whose keys and values are not all str"
            )
            raise InvalidTypeError(
                "Ask(display_reason=...) must be the English text (a str) or a mapping of language to text, "
                f'such as {{"en": "Delete the file?", "fr": "Supprimer le fichier ?"}} (got {got})'
            )


PreToolDecision: TypeAlias = Allow | Deny | Cancel | Ask


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What an approval service is asked about an ``Ask``: which agent's call
    of which tool, why (``reason``, audited; ``display_reason``, localized
    prompt text), and the call's cancellation ``signal`` (a service that
    waits for a person must observe it and answer ``"cancelled"`` when it
    fires)."""

    agent: Agent
    tool_name: str
    call_id: str
    reason: str | None
    display_reason: Any
    signal: AbortSignal
    arguments: Any = None


@dataclass(frozen=True, slots=True)
class Accept:
    """Post-execute: keep the result, replacing its ``content`` *or* its
    ``value`` (never both), and/or attaching contexts."""

    content: tuple[ContentBlock, ...] | None = None
    value: Any = UNSET
    additional_contexts: tuple[UserMessage, ...] = ()

    def __post_init__(self) -> None:
        raw: Any = self.content
        if raw is not None and not isinstance(raw, (str, bytes)):
            try:
                object.__setattr__(self, "content", tuple(raw))
            except TypeError:
                pass  # left as is: the pipeline reports the bad content
        object.__setattr__(self, "additional_contexts", tuple(self.additional_contexts))


@dataclass(frozen=True, slots=True)
class Block:
    """Post-execute: turn the result into a failure whose content is
    ``feedback`` (corrective text for the model)."""

    feedback: tuple[ContentBlock, ...]
    additional_contexts: tuple[UserMessage, ...] = ()

    def __post_init__(self) -> None:
        raw: Any = self.feedback
        if not isinstance(raw, (str, bytes)):
            try:
                object.__setattr__(self, "feedback", tuple(raw))
            except TypeError:
                pass
        object.__setattr__(self, "additional_contexts", tuple(self.additional_contexts))


PostToolDecision: TypeAlias = Accept | Block


def slot_setters(cls: type, names: tuple[str, ...]) -> tuple[Callable[[Any, Any], None], ...]:
    """The setters of ``cls``'s slots ``names``, for the few hot-path
    constructors that skip a frozen dataclass's ``__init__`` (which goes
    through ``object.__setattr__`` once per field). For a dataclass,
    ``names`` must be all its fields, in order: otherwise ``ImportError``,
    so whoever changes the class also changes the constructor."""
    if is_dataclass(cls) and tuple(f.name for f in fields(cls)) != names:
        raise ImportError(f"a fast constructor of {cls.__qualname__} must set exactly its fields {names}")
    return tuple(vars(cls)[name].__set__ for name in names)


_new_text = TextBlock.__new__
_set_text_text, _set_text_type = slot_setters(TextBlock, ("text", "type"))

_new_image = ImageBlock.__new__
_set_image_data, _set_image_mime_type, _set_image_type = slot_setters(ImageBlock, ("data", "mime_type", "type"))


def _logged_image(data: str, mime_type: str) -> ImageBlock:
    """An :class:`ImageBlock` as a log holds it, without its checks of the
    data and the type (:func:`content_from_json`)."""
    block = _new_image(ImageBlock)
    _set_image_data(block, data)
    _set_image_mime_type(block, mime_type)
    _set_image_type(block, "image")
    return block
