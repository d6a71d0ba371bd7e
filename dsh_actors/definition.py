"""Tool definitions: what a registry holds and how an author writes one.

A :class:`ToolDefinition` is the raw, MCP-style form: a model-facing schema
(``name``, ``description``, ``parameters``), a mandatory :class:`ToolOutput`
declaration, the ``execute`` body, and host-only metadata and callbacks that
never reach the model. In the default ``schema_mode="subset"`` the runtime
does not validate a raw definition's arguments (its body validates its own
input) and its schemas must stay inside the enforced subset. With
``schema_mode="full"`` its schemas may be any Draft 2020-12 (or draft-07)
schema, and the runtime enforces both: arguments before the body
(``INVALID_ARGS``), the value after it (``INVALID_TOOL_OUTPUT``).

:func:`define_tool` is the author path: it compiles the schema DSL, checks
everything registration would reject, and wraps the callbacks so that the
body only ever sees arguments that match ``parameters`` (invalid ones fail
the call with ``ToolArgsError``), the classifier and a ``requires_approval``
predicate answer ``False`` and the presenters ``None`` on invalid
arguments, and neither the classifier nor the presenters ever raise.

:func:`validate_definition` is what registration runs: every structural
check, with every problem reported at once, and the output and parameter
validators compiled once into a :class:`CheckedDefinition`.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypedDict, cast

from loguru import logger

from .errors import (
    DshError,
    JsonSchemaError,
    RegistrationError,
    ToolArgsError,
    exception_text,
    safe_str,
)
from .errors import (
    shown_value as _shown,
)
from .json import dumps, thaw
from .model import ContentBlock, TextBlock, ToolExecutionResult, text
from .presentation import PresentedResult, ToolCallView, ToolResultView
from .presentation._projection import checked_view, first_failure
from .schema import (
    CompiledJsonSchema,
    FullJsonSchema,
    args_error,
    assert_object_json_schema,
    assert_supported_json_schema,
    compile_full_json_schema,
    compile_json_schema,
    parameter_schema_spec_to_json_schema,
    validate_args,
    value_schema_spec_to_json_schema,
)

if TYPE_CHECKING:  # pragma: no cover
    from .execution import ToolExecution, ToolRunContext

__all__ = [
    "OWN_VALIDATORS",
    "RESERVED_NAMES",
    "CheckedDefinition",
    "OwnValidators",
    "SchemaEnforcer",
    "ToolDefinition",
    "ToolOutput",
    "ToolSchema",
    "constant_classifier",
    "default_text",
    "define_tool",
    "guarded_callbacks",
    "is_async_callable",
    "own_validators",
    "reserved_name_problem",
    "validate_definition",
]


class ToolSchema(TypedDict):
    """The model-facing projection of a tool: exactly these three keys.
    ``schemas()`` builds fresh ones; no callback, ``timeout_ms``,
    ``idempotent``, ``requires_approval``, classifier or ``meta`` ever
    appears in them."""

    name: str
    description: str
    parameters: dict[str, Any]


Render = Callable[[Any, Any], "list[ContentBlock]"]
PresentationMeta = Callable[[Any, Any], Any]
Execute = Callable[[Any, "ToolRunContext"], Any]
Classifier = Callable[[Any], bool]
ContentHook = Callable[["ToolExecution", ToolExecutionResult], "list[ContentBlock] | None"]
PresentCall = Callable[[Any], "ToolCallView | None"]
PresentResult = Callable[[Any, PresentedResult], "ToolResultView | None"]


class _Validates(Protocol):
    def is_valid(self, args: Any) -> bool: ...


class SchemaEnforcer(Protocol):
    """What a definition's schema compiles to, whatever enforces it: the
    subset's :class:`~dsh_actors.schema.CompiledJsonSchema`, full mode's
    :class:`~dsh_actors.schema.FullJsonSchema`, or the pydantic-core
    validators of a :func:`~dsh_actors.tool` definition. Thread-safe."""

    @property
    def schema(self) -> Any:
        """The frozen JSON Schema enforced."""

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` (frozen lossless JSON) conforms; no message built."""

    def validate(self, value: Any, path: str = "value") -> list[str]:
        """Every violation of ``value``, each naming its path from ``path``
        (empty: valid)."""


@dataclass(frozen=True, slots=True)
class OwnValidators:
    """The validators a definition's ``execute`` brings with it (those of a
    :func:`~dsh_actors.tool` definition, built once at decoration), and the
    typed function it calls, carried as ``execute.__dsh_validators__``.

    They stand for a full-mode definition's schemas only while
    ``parameters`` and ``output.schema`` are the very objects they enforce
    (a ``dataclasses.replace`` that keeps both keeps them); otherwise the
    definition is a plain full-mode one, checked and wrapped as usual."""

    parameters: SchemaEnforcer
    """Enforces ``definition.parameters``; its ``schema`` is that object."""

    output: SchemaEnforcer
    """Enforces ``definition.output.schema`` on the value's JSON form; its
    ``schema`` is that object."""

    function: Callable[..., Any]
    """The function ``@tool`` made the definition of: what calling the
    definition calls (:class:`~dsh_actors.typed.TypedToolDefinition`)."""


OWN_VALIDATORS: Final = "__dsh_validators__"


def own_validators(defn: ToolDefinition) -> OwnValidators | None:
    """``defn.execute``'s own validators when they enforce exactly
    ``defn``'s schemas in full mode (see :class:`OwnValidators`), else None."""
    own = getattr(defn.execute, OWN_VALIDATORS, None)
    if type(own) is not OwnValidators or defn.schema_mode != "full":
        return None
    output: object = defn.output  # typed as required, but registration checks it
    if not isinstance(output, ToolOutput):
        return None
    if own.parameters.schema is not defn.parameters or own.output.schema is not output.schema:
        return None
    return own


SchemaMode = Literal["subset", "full"]
SCHEMA_MODES: Final = ("subset", "full")


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's canonical output contract, applied after the body returns.

    Both callbacks run after the value passed ``schema``: on the call actor
    thread that dispatched the call (right after the body), or on the
    finalizing thread when a post-execute ``Accept(value=...)`` replaces the
    value. They must be pure, fast and non-blocking.
    """

    schema: Any
    """The JSON Schema every successful value must satisfy: raw (enforced
    subset) on a :class:`ToolDefinition`; a ``ValueSchemaSpec`` when given to
    :func:`define_tool`, which stores the compiled raw schema on the
    definition it returns."""

    render: Render | None = None
    """``render(args, value) -> list[ContentBlock]``: the model-facing
    content of a validated value. ``None`` (the default): a ``str`` value is
    sent as it is, any other value as its compact JSON text
    (``{"a":[1,2]}``, ``3``, ``null``): :func:`default_text`."""

    presentation_meta: PresentationMeta | None = None
    """``presentation_meta(args, value) -> JSON``: replayable presentation
    data logged as the result's ``meta`` (root calls only)."""


def default_text(value: Any) -> TextBlock:
    """The content of a value when its tool has no ``render``: a ``str`` as
    it is, anything else (a lossless JSON value) as its compact JSON text
    (never a Python repr)."""
    return text(value if type(value) is str else dumps(value).decode())


def _required_output() -> ToolOutput:
    # Typed as required; a definition built without one is rejected by
    # registration with "output is required" (docs/reference.md, section 4).
    return cast(ToolOutput, None)


@dataclass(frozen=True, eq=False, kw_only=True, slots=True)
class ToolDefinition:
    """A registered tool: its model-facing schema, its output contract, its
    body, and host-only callbacks.

    Definitions compare by identity: registering an equal-looking definition
    again is a different registration. A raw definition in the default
    ``schema_mode="subset"`` is not argument-validated by the runtime;
    :func:`define_tool` builds one whose callbacks validate, and so does
    ``schema_mode="full"`` (see that field).

    A definition is not callable: it runs through the runtime
    (``rt.tools.execute``). Only the subclass :func:`~dsh_actors.tool`
    returns (:class:`~dsh_actors.typed.TypedToolDefinition`) is, as its
    function.
    """

    name: str
    """The tool's name, as the model calls it."""

    description: str
    """Model-facing description."""

    parameters: Mapping[str, Any]
    """Raw JSON Schema of the arguments (enforced subset, ``type: object``
    root)."""

    output: ToolOutput = field(default_factory=_required_output)
    """The canonical output contract. Required: registration rejects a
    definition without one."""

    execute: Execute
    """``execute(args, ctx)``: run one accepted call and return its
    canonical lossless-JSON value. ``args`` are the frozen arguments (a
    read-only mapping whose lists are tuples: ``args["paths"] == ["a"]`` is
    False, ``thaw(args)`` gives plain ones), ``ctx`` a
    :class:`~dsh_actors.execution.ToolRunContext`. A plain function runs on
    a call actor's worker thread and may block (it should watch
    ``ctx.signal``); an ``async def`` runs on the batch's event loop (the
    loop that awaits ``rt.tools.execute_async``, else the runtime's bound
    loop, else its own loop thread) and must not block it. Either way the
    call settles only after the body returns."""

    is_concurrency_safe: Classifier | None = None
    """``is_concurrency_safe(args) -> bool``: whether this call may overlap
    its siblings. Only an exact ``True`` opts in; ``None``, an exception or
    any other answer means exclusive. Runs on the executor's thread when the
    call is about to start: pure, fast, non-blocking."""

    timeout_ms: float | None = None
    """Cooperative deadline in milliseconds (a positive finite number), or
    ``None`` for none; enforced by the timeout policy. Declaring it asserts
    the body watches ``ctx.signal``. Never model-visible."""

    idempotent: bool = False
    """Whether running the body twice for one call has the effect of running
    it once (a read, or a write keyed by the call). Only crash recovery
    reads it (``rt.tools.recover``): a call whose body started and left no
    logged result runs again only when its tool is idempotent; otherwise it
    gets an ``INTERRUPTED`` failure. Never model-visible."""

    requires_approval: bool | Classifier = False
    """Whether a call needs a person's approval before it runs: ``True``
    (every call), ``False`` (the default), or a predicate
    ``requires_approval(args) -> bool`` on the frozen arguments (pure, fast,
    non-blocking, like ``is_concurrency_safe``). For a call that needs it,
    the ``tools/pre-execute`` waterfall's default (what the last ``next()``
    returns, and the decision when no listener is subscribed) is
    ``Ask(reason='tool "<name>" requires approval (its definition sets
    requires_approval)')`` instead of ``Allow()``, routed to the approval
    service like any ``Ask``. A listener that returns a decision without
    calling ``next()`` still decides, an ``Allow()`` included. A predicate
    that raises or answers anything but a bool fails the call
    ``POLICY_FAILED`` (``requires_approval: ...``, naming the tool). Never
    model-visible."""

    project_content: ContentHook | None = None
    """``project_content(execution, result) -> content | None``: replace the
    rendered content before ``tools/post-execute`` (``None`` keeps it). Runs
    once per outcome entering post-execute, on the executor's finalize
    thread: pure, fast, non-blocking."""

    finalize_content: ContentHook | None = None
    """``finalize_content(execution, result) -> content | None``: last-mile
    transform of the model-facing content, called exactly once for every
    outcome (pipeline failures included) just before the result is frozen.
    Runs on the executor's finalize thread; must be total, pure, fast and
    non-blocking."""

    present_call: PresentCall | None = None
    """``present_call(args) -> ToolCallView | None``: the pending call's UI
    card (``None``: the generic card). Runs on the caller's thread, live and
    on replay: pure, depending only on ``args``."""

    present_result: PresentResult | None = None
    """``present_result(args, result) -> ToolResultView | None``: the
    completed call's UI card, from the durable result projection
    (:class:`~dsh_actors.presentation.ToolResultProjection`). Runs on the
    caller's thread, live and on replay: pure, depending only on its
    arguments."""

    meta: Mapping[str, Any] | None = None
    """Free host-only metadata for the application's own policies; never
    model-visible."""

    schema_mode: SchemaMode = "subset"
    """How ``parameters`` and ``output.schema`` are enforced.

    ``"subset"`` (the default): both must lie inside the enforced subset
    (docs/reference.md, section 3); the output is validated, the arguments are not.

    ``"full"``: both may be any Draft 2020-12 schema (draft-07 when the
    root's ``$schema`` says so: ``anyOf``, ``minimum``, ``format``, local
    ``$defs``/``$ref``...), compiled once at registration by
    :func:`~dsh_actors.schema.compile_full_json_schema` (the subset's fast
    validator when a schema happens to fit it, jsonschema-rs otherwise; remote
    references are refused). ``parameters`` must still declare a root
    ``"type": "object"``. The runtime then enforces both schemas: the
    definition's callbacks are wrapped at construction the way
    :func:`define_tool` wraps them (the originals stay reachable as
    ``__wrapped__``): ``execute`` raises :class:`ToolArgsError`
    (``INVALID_ARGS``, path-named violations) without calling the body when
    the arguments do not match, ``is_concurrency_safe`` answers ``False`` and
    the presenters ``None`` on invalid arguments. Output violations are
    ``INVALID_TOOL_OUTPUT`` as in the subset. MCP tools mounted by
    :func:`dsh_actors.mcp.mount` use this mode, and so do the definitions
    :func:`~dsh_actors.tool` makes, whose ``execute`` brings pydantic-core
    validators of its own (:class:`OwnValidators`): those enforce the
    schemas instead, and only callbacks not guarded already are wrapped."""

    _checked: CheckedDefinition | None = field(default=None, init=False, repr=False)
    # Set by define_tool: the registration check it already ran, with the
    # parameter validator its wrappers use, so registration compiles nothing
    # twice. dataclasses.replace() drops it (the copy is checked afresh).

    def __post_init__(self) -> None:
        if self.schema_mode == "full":
            own = own_validators(self)
            if own is None:
                _wrap_full(self)
            else:
                _guard_own(self, own)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedDefinition:
    """A definition that passed :func:`validate_definition`, with what the
    registry needs compiled once: the output and parameter validators, and
    detached deep-frozen copies of both schemas (later changes to the
    caller's dicts change nothing)."""

    definition: ToolDefinition
    """The definition as registered (compared by identity)."""

    output_validator: SchemaEnforcer
    """Compiled ``definition.output.schema``; ``.schema`` is its frozen copy.
    A :class:`~dsh_actors.schema.FullJsonSchema` only in full mode; a
    pydantic-core validator for a :func:`~dsh_actors.tool` definition."""

    parameter_validator: SchemaEnforcer
    """Compiled ``definition.parameters``; ``.schema`` is its frozen copy.
    A :class:`~dsh_actors.schema.FullJsonSchema` only in full mode; a
    pydantic-core validator for a :func:`~dsh_actors.tool` definition."""

    is_async: bool
    """Whether ``definition.execute`` is an ``async def`` (runs on the
    batch's event loop) rather than a plain function (a worker thread)."""

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def output(self) -> ToolOutput:
        return self.definition.output

    @property
    def parameters(self) -> Any:
        """The frozen copy of the parameter schema that was checked."""
        return self.parameter_validator.schema

    def tool_schema(self) -> ToolSchema:
        """A fresh model-facing projection (plain dicts, safe to mutate)."""
        return {
            "name": self.definition.name,
            "description": self.definition.description,
            "parameters": thaw(self.parameter_validator.schema),
        }


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine to await: an ``async def``
    (also behind ``functools.partial``) or an object whose ``__call__`` is
    one."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the method itself: is it async?
    return not inspect.isroutine(fn) and call is not None and inspect.iscoroutinefunction(call)


# --------------------------------------------------------------------------
# Registration checks
# --------------------------------------------------------------------------

_OPTIONAL_CALLBACKS: Final = (
    "is_concurrency_safe",
    "project_content",
    "finalize_content",
    "present_call",
    "present_result",
)


# Registration is a trusted same-process contract, but its input is typed
# only statically: these checks take ``object`` so that the type checker
# does not call the runtime checks unreachable.
def _callable(value: object) -> bool:
    return callable(value)


def _is_instance(value: object, cls: type) -> bool:
    return isinstance(value, cls)


def _idempotent_problem(idempotent: object) -> str | None:
    if type(idempotent) is bool:
        return None
    return f"idempotent must be True or False (got {_shown(idempotent)})"


def _requires_approval_problem(requires_approval: object) -> str | None:
    if type(requires_approval) is bool or callable(requires_approval):
        return None
    return (
        "requires_approval must be True, False or a callable requires_approval(args) -> bool "
        f"(got {_shown(requires_approval)})"
    )


#: The longest wait, in milliseconds, that an option of the runtime, its
#: policies or its executors may ask for (about 11.6 days): a longer one is
#: no deadline, backoff or stop that a process waits out, and Python's own
#: waits fail past ``threading.TIMEOUT_MAX`` (``OverflowError``) or about
#: 3e11 s ("timestamp out of range"). (A tool's ``timeout_ms`` has no bound:
#: its deadline's timer waits for it a day at a time.)
LONGEST_WAIT_MS: Final = 1e9


def timeout_problem(timeout_ms: object) -> str | None:
    """Why ``timeout_ms`` cannot be a tool's (or a mount's) timeout, or None."""
    if timeout_ms is None:
        return None
    if (
        type(timeout_ms) in (int, float)
        and not (type(timeout_ms) is int and timeout_ms.bit_length() > 64)  # (no float holds it: no deadline)
        and math.isfinite(cast(float, timeout_ms))
        and cast(float, timeout_ms) > 0
    ):
        return None
    return f"timeout_ms must be a positive finite number (got {_shown(timeout_ms)})"


#: Names no registration may take and no restriction may mention: the
#: code-mode executor's transport (the executor offers it itself).
RESERVED_NAMES: Final = frozenset({"run_code"})


def reserved_name_problem(name: object) -> str | None:
    """Why registration refuses ``name`` as one of :data:`RESERVED_NAMES`,
    naming the fix, or None. (Registration's check, and ``@tool``'s, which
    refuses at decoration what registration would.)"""
    if type(name) is not str or name not in RESERVED_NAMES:
        return None
    return f'"{name}" is reserved for the code-mode transport; give the tool another name'


TOOL_NAME_RULE: Final = "^[a-zA-Z0-9_-]{1,64}$"
"""The tool names registration accepts: what the OpenAI and Anthropic APIs
accept (1 to 64 ASCII letters, digits, ``_`` and ``-``)."""
_TOOL_NAME_RE: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}", re.ASCII)


def _name_problem(name: object) -> str | None:
    if type(name) is not str or not name:
        return f"name must be a non-empty str (got {_shown(name)})"
    if _TOOL_NAME_RE.fullmatch(name) is None:
        return (
            f"name {_shown(name)} does not match {TOOL_NAME_RULE} (1 to 64 ASCII letters, digits, "
            "'_' or '-': what the model APIs accept); rename the tool, e.g. with '_' for other characters"
        )
    return None


def _execute_problem(execute: object) -> str | None:
    """Why ``execute`` cannot be a body called as ``execute(args, ctx)``, or
    None. A callable without an inspectable signature (some builtins) is
    taken on trust."""
    if not callable(execute):
        return f"execute must be callable (got {_shown(execute)})"
    try:
        signature = inspect.signature(execute, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(None, None)
    except TypeError:
        label = getattr(execute, "__name__", None)
        bare = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        shown = f"{label if type(label) is str else type(execute).__qualname__}{safe_str(bare)}"
        return (
            f"execute must accept two positional arguments, (args, ctx), and {shown} does not "
            "(to write a tool as a function of typed parameters, decorate it with @tool)"
        )
    return None


def _callback_problems(callbacks: Mapping[str, object]) -> list[str]:
    return [
        f"{key} must be callable or None (got {_shown(value)})"
        for key, value in callbacks.items()
        if value is not None and not callable(value)
    ]


def _output_problems(output: object) -> list[str]:
    """Structural problems of ``output`` (not its schema)."""
    if output is None:
        return ["output is required"]
    if not isinstance(output, ToolOutput):
        return [f"output must be a ToolOutput (got {type(output).__qualname__})"]
    problems = []
    if output.render is not None and not _callable(output.render):
        problems.append(f"output.render must be callable or None (got {_shown(output.render)})")
    if output.presentation_meta is not None and not _callable(output.presentation_meta):
        problems.append(f"output.presentation_meta must be callable or None (got {_shown(output.presentation_meta)})")
    return problems


def _raise(problems: list[str], tool: str | None) -> None:
    if problems:
        raise RegistrationError("; ".join(problems), tool=tool)


def _tool_label(name: object) -> str | None:
    return name if type(name) is str and name else None


def _compile(
    check: Callable[[object], None], schema: object, where: str, problems: list[str]
) -> CompiledJsonSchema | None:
    try:
        check(schema)
        return compile_json_schema(schema)
    except DshError as err:  # JsonSchemaError, or LosslessJsonError from a hostile schema
        problems.append(f"{where}: {err.message}")
    return None


def _compile_full(
    schema: object, where: str, problems: list[str], *, object_root: bool
) -> CompiledJsonSchema | FullJsonSchema | None:
    try:
        return compile_full_json_schema(schema, object_root=object_root)
    except DshError as err:
        problems.append(f"{where}: {err.message}")
    return None


def validate_definition(defn: object) -> CheckedDefinition:
    """Check ``defn`` the way registration does and compile its schemas.

    Rejects (all problems at once, joined with ``"; "``, in one
    :class:`RegistrationError` naming the tool): something that is not a
    :class:`ToolDefinition`; a name that is not a non-empty str matching ``TOOL_NAME_RULE``; a
    description that is not a str; a missing ``output``, one that is not a
    :class:`ToolOutput`, a ``render`` or a ``presentation_meta`` that is
    neither callable nor ``None``; an output schema outside the enforced
    subset; parameters that are not an object-rooted schema of the subset;
    an ``execute`` that is not callable, or that cannot be called as
    ``execute(args, ctx)``;
    a ``timeout_ms`` that is not a positive finite int or float; an
    ``idempotent`` that is not a bool; a ``requires_approval`` that is
    neither a bool nor callable; other
    callbacks that are neither callable nor ``None``; a ``meta`` that is not
    a mapping; a ``schema_mode`` other than ``"subset"``/``"full"``. In full
    mode the schemas are checked and compiled by
    :func:`~dsh_actors.schema.compile_full_json_schema` instead of the
    subset (parameters still object-rooted), unless ``execute`` brings
    validators of its own for exactly these schemas (:class:`OwnValidators`,
    a :func:`~dsh_actors.tool` definition): those are used, nothing is
    compiled. The reserved name and duplicates are the registry's checks.

    Runs on the registering thread; pure apart from compiling (cached).
    """
    if not isinstance(defn, ToolDefinition):
        raise RegistrationError(_not_a_definition(defn))
    if defn._checked is not None and defn._checked.definition is defn:
        return defn._checked
    return _check(defn, parameter_validator=None)


def _not_a_definition(value: object) -> str:
    """What registering ``value``, which is no :class:`ToolDefinition`,
    gets told: what it is and how to make a definition."""
    if inspect.isfunction(value) or inspect.ismethod(value):
        return (
            f"expected a ToolDefinition, got the function {safe_str(value.__name__)}: decorate it with @tool "
            "(from dsh_actors import tool), or make a definition with define_tool(...)"
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        return (
            f"expected a ToolDefinition, got a {type(value).__qualname__}: register several at once with "
            "rt.tools.register_all(definitions) (one change, a disposer for each), or one per call with "
            "rt.tools.register(definition)"
        )
    return (
        f"expected a ToolDefinition, got {type(value).__qualname__}: make one with @tool on a typed function, "
        "or with define_tool(...)"
    )


def _check(defn: ToolDefinition, parameter_validator: SchemaEnforcer | None) -> CheckedDefinition:
    problems: list[str] = []
    name_problem = _name_problem(defn.name)
    if name_problem is not None:
        problems.append(name_problem)
    if type(defn.description) is not str:
        problems.append(f"description must be a str (got {_shown(defn.description)})")
    mode: object = defn.schema_mode
    full = type(mode) is str and mode == "full"
    if not (type(mode) is str and mode in SCHEMA_MODES):
        problems.append(f'schema_mode must be "subset" or "full" (got {_shown(mode)})')
    output_problems = _output_problems(defn.output)
    problems.extend(output_problems)
    output_validator: SchemaEnforcer | None = None
    own = own_validators(defn) if full and not output_problems else None
    if own is not None:
        # A @tool definition: pydantic-core enforces both schemas, built at decoration.
        output_validator, parameter_validator = own.output, own.parameters
    elif not output_problems:
        if full:
            output_validator = _compile_full(defn.output.schema, "output.schema", problems, object_root=False)
        else:
            output_validator = _compile(assert_supported_json_schema, defn.output.schema, "output.schema", problems)
    if parameter_validator is None:
        if full:
            parameter_validator = _compile_full(defn.parameters, "parameters", problems, object_root=True)
        else:
            parameter_validator = _compile(assert_object_json_schema, defn.parameters, "parameters", problems)
    if not full and any(": unsupported JSON schema: " in problem for problem in problems):
        problems.append('schema_mode="full" would enforce any Draft 2020-12 schema instead')
    execute_problem = _execute_problem(defn.execute)
    if execute_problem is not None:
        problems.append(execute_problem)
    timeout_wrong = timeout_problem(defn.timeout_ms)
    if timeout_wrong is not None:
        problems.append(timeout_wrong)
    idempotent_problem = _idempotent_problem(defn.idempotent)
    if idempotent_problem is not None:
        problems.append(idempotent_problem)
    approval_problem = _requires_approval_problem(defn.requires_approval)
    if approval_problem is not None:
        problems.append(approval_problem)
    problems.extend(_callback_problems({key: getattr(defn, key) for key in _OPTIONAL_CALLBACKS}))
    if defn.meta is not None and not _is_instance(defn.meta, Mapping):
        problems.append(f"meta must be a mapping or None (got {type(defn.meta).__qualname__})")
    _raise(problems, _tool_label(defn.name))
    assert output_validator is not None and parameter_validator is not None
    return CheckedDefinition(
        definition=defn,
        output_validator=output_validator,
        parameter_validator=parameter_validator,
        is_async=is_async_callable(defn.execute),
    )


# --------------------------------------------------------------------------
# The author path
# --------------------------------------------------------------------------


def define_tool(
    *,
    name: str,
    description: str,
    parameters: Mapping[str, Any],
    output: ToolOutput,
    execute: Execute,
    is_concurrency_safe: Classifier | bool | None = None,
    timeout_ms: float | None = None,
    idempotent: bool = False,
    requires_approval: bool | Classifier = False,
    project_content: ContentHook | None = None,
    finalize_content: ContentHook | None = None,
    present_call: PresentCall | None = None,
    present_result: PresentResult | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ToolDefinition:
    """Build a :class:`ToolDefinition` from the author DSL.

    ``parameters`` is a ``ParameterSchemaSpec`` (a dict of property specs,
    each optionally ``"required": True``) and ``output.schema`` a
    ``ValueSchemaSpec``; both are compiled to raw JSON Schema, stored on the
    returned definition as detached deep-frozen copies, and the parameter
    validator is compiled once, here (registration reuses it).

    The returned definition's callbacks wrap the ones given:

    * ``execute`` validates the arguments before the body and raises
      :class:`ToolArgsError` (``invalid arguments: a; b``) without calling it
      when they do not match; it is an ``async def`` exactly when the body
      is one. The body stays reachable as ``definition.execute.__wrapped__``.
    * ``is_concurrency_safe`` answers ``False`` on invalid arguments and when
      the classifier raises; otherwise the classifier's answer, unchanged. A
      bool is a constant classifier (``True``: every valid call may overlap
      its siblings).
    * ``requires_approval`` (a bool, or a predicate on the arguments: see
      :attr:`ToolDefinition.requires_approval`): a predicate answers
      ``False`` on invalid arguments without being called (the body will not
      run: the call fails ``INVALID_ARGS``), otherwise its own answer.
    * ``present_call`` / ``present_result`` answer ``None`` on invalid
      arguments, and when the presenter raises or returns something that
      is not a view (a warning naming the fix, once per tool, presenter and
      kind of failure); they never raise.

    Raises :class:`RegistrationError` (naming the tool, every problem at
    once) for what registration would reject, an ``execute`` that cannot be
    called as ``execute(args, ctx)`` included, and :class:`JsonSchemaError`
    for a schema spec outside the DSL, each violation naming the tool and
    its path (``tool "x": parameters.q.type: ...``, ``tool "x":
    output.schema.items: ...``), both specs' violations in one error. A
    raw JSON Schema given where the DSL is expected, or a JSON Schema
    keyword the DSL lacks (``minimum``, ``pattern``, ``anyOf``, a list of
    types...), gets a last violation naming the two ways to have it:
    :func:`~dsh_actors.tool` or ``ToolDefinition(..., schema_mode="full")``.
    """
    problems: list[str] = []
    name_problem = _name_problem(name)
    if name_problem is not None:
        problems.append(name_problem)
    if type(description) is not str:
        problems.append(f"description must be a str (got {_shown(description)})")
    problems.extend(_output_problems(output))
    execute_problem = _execute_problem(execute)
    if execute_problem is not None:
        problems.append(execute_problem)
    timeout_wrong = timeout_problem(timeout_ms)
    if timeout_wrong is not None:
        problems.append(timeout_wrong)
    idempotent_problem = _idempotent_problem(idempotent)
    if idempotent_problem is not None:
        problems.append(idempotent_problem)
    approval_problem = _requires_approval_problem(requires_approval)
    if approval_problem is not None:
        problems.append(approval_problem)
    classifier = constant_classifier(is_concurrency_safe) if type(is_concurrency_safe) is bool else is_concurrency_safe
    problems.extend(
        _callback_problems(
            {
                "is_concurrency_safe": classifier,
                "project_content": project_content,
                "finalize_content": finalize_content,
                "present_call": present_call,
                "present_result": present_result,
            }
        )
    )
    if meta is not None and not _is_instance(meta, Mapping):
        problems.append(f"meta must be a mapping or None (got {type(meta).__qualname__})")
    _raise(problems, _tool_label(name))

    # Compile both specs before raising, so one error lists every violation.
    violations: list[str] = []
    raw_parameters: Any = None
    raw_output: Any = None
    raw_given = _raw_schema_sign(parameters)
    if raw_given is not None:
        violations.append(
            f'tool "{name}": parameters is a raw JSON Schema (it has {raw_given}), but define_tool takes the '
            'DSL: a dict of property specs, such as {"q": {"type": "string", "required": True}}'
        )
    else:
        try:
            raw_parameters = parameter_schema_spec_to_json_schema(parameters)
        except JsonSchemaError as err:
            violations.extend(f'tool "{name}": {v}' for v in err.violations)  # paths read "parameters..."
    try:
        raw_output = value_schema_spec_to_json_schema(output.schema)
    except JsonSchemaError as err:
        violations.extend(f'tool "{name}": {_output_path(v)}' for v in err.violations)
    if violations:
        if raw_given is not None or any(_beyond_the_dsl(v) for v in violations):
            violations.append(_BEYOND_THE_DSL)
        raise JsonSchemaError(violations)
    try:
        validator = compile_json_schema(raw_parameters)
        output_schema = compile_json_schema(raw_output).schema
    except JsonSchemaError as err:  # pragma: no cover - the DSL compiles into the subset
        raise JsonSchemaError([f'tool "{name}": {v}' for v in err.violations]) from err

    definition = ToolDefinition(
        name=name,
        description=description,
        parameters=validator.schema,
        output=ToolOutput(schema=output_schema, render=output.render, presentation_meta=output.presentation_meta),
        execute=_validating_execute(name, validator, execute),
        is_concurrency_safe=None if classifier is None else _classifier(name, validator, classifier),
        timeout_ms=timeout_ms,
        idempotent=idempotent,
        requires_approval=_guarded_requires_approval(name, validator, requires_approval),
        project_content=project_content,
        finalize_content=finalize_content,
        present_call=None if present_call is None else _call_presenter(name, validator, present_call),
        present_result=None if present_result is None else _result_presenter(name, validator, present_result),
        meta=meta,
    )
    checked = _check(definition, parameter_validator=validator)
    object.__setattr__(definition, "_checked", checked)
    return definition


def constant_classifier(answer: bool) -> Classifier:
    """The classifier a bool ``is_concurrency_safe`` stands for."""

    def is_concurrency_safe(args: Any) -> bool:
        return answer

    is_concurrency_safe.__qualname__ = f"constant_classifier({answer})"
    return is_concurrency_safe


# JSON Schema keywords the DSL does not have: a violation naming one of them
# (or a list of types) is a schema the DSL cannot say.
_JSON_SCHEMA_ONLY: Final = frozenset(
    {
        "$schema", "$id", "$ref", "$defs", "definitions", "anyOf", "allOf", "not", "if", "then", "else",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
        "pattern", "format", "minItems", "maxItems", "uniqueItems", "prefixItems", "contains", "minProperties",
        "maxProperties", "patternProperties", "propertyNames", "dependentRequired", "nullable",
    }
)  # fmt: skip
_BEYOND_THE_DSL: Final = (
    "the DSL has no anyOf, minimum, pattern, $ref or list of types: write the tool as a typed function "
    "with @tool (X | None, Annotated[int, Field(ge=0)], pydantic models), or give the raw JSON Schema "
    'to ToolDefinition(..., schema_mode="full")'
)


def _beyond_the_dsl(violation: str) -> bool:
    if violation.endswith(" (got array)") and ".type: must be one of " in violation:
        return True  # "type": ["string", "null"]
    marker = ': unknown key "'
    at = violation.rfind(marker)
    return at >= 0 and violation[at + len(marker) : -1] in _JSON_SCHEMA_ONLY


def _raw_schema_sign(parameters: object) -> str | None:
    """What shows that ``parameters`` is a raw JSON Schema rather than the
    DSL's map of property specs (a root ``"type": "object"``, a
    ``"properties"`` map, ``"$schema"``), or None."""
    if not isinstance(parameters, Mapping):
        return None
    if parameters.get("type") == "object":
        return '"type": "object" at its root'
    if isinstance(parameters.get("properties"), Mapping) and not isinstance(parameters["properties"].get("type"), str):
        return 'a "properties" map at its root'
    if "$schema" in parameters:
        return '"$schema" at its root'
    return None


class _FullParameters:
    """The parameter validator of a full-mode definition, compiled on first
    use (registration compiles it first; a definition that never registers
    compiles it when its wrapped callbacks are first called)."""

    __slots__ = ("schema", "_compiled")

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self._compiled: CompiledJsonSchema | FullJsonSchema | None = None

    def compiled(self) -> CompiledJsonSchema | FullJsonSchema:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = compile_full_json_schema(self.schema, object_root=True)
        return compiled

    def is_valid(self, args: Any) -> bool:
        return self.compiled().is_valid(args)

    def raise_invalid(self, args: Any) -> None:
        violations = self.compiled().validate(args)
        raise args_error(args, violations or ['"value" does not match the parameters'])


_FULL_WRAPPED = "__dsh_full_mode__"


def _unwrapped(fn: Any) -> Any:
    """The author's callable behind a full-mode wrapper (so that
    ``dataclasses.replace`` of a full-mode definition wraps once)."""
    return fn.__wrapped__ if getattr(fn, _FULL_WRAPPED, False) else fn


def _wrap_full(defn: ToolDefinition) -> None:
    """Wrap a full-mode definition's callbacks so the runtime enforces its
    parameters (see ``ToolDefinition.schema_mode``). Malformed fields are
    left alone: registration reports them."""
    name = defn.name if type(defn.name) is str else "<unnamed>"
    validator = _FullParameters(defn.parameters)
    setters: dict[str, Any] = {}
    execute = _unwrapped(defn.execute)
    if callable(execute):
        setters["execute"] = _full_execute(name, validator, execute)
    classifier = _unwrapped(defn.is_concurrency_safe)
    if callable(classifier):
        setters["is_concurrency_safe"] = _classifier(name, validator, classifier)
    requires_approval = _unwrapped(defn.requires_approval)
    if callable(requires_approval):
        setters["requires_approval"] = _guarded_requires_approval(name, validator, requires_approval)
    present_call = _unwrapped(defn.present_call)
    if callable(present_call):
        setters["present_call"] = _call_presenter(name, validator, present_call)
    present_result = _unwrapped(defn.present_result)
    if callable(present_result):
        setters["present_result"] = _result_presenter(name, validator, present_result)
    for key, wrapper in setters.items():
        setattr(wrapper, _FULL_WRAPPED, True)
        object.__setattr__(defn, key, wrapper)


def _full_execute(name: str, validator: _FullParameters, body: Execute) -> Execute:
    if is_async_callable(body):

        async def execute_async(args: Any, ctx: ToolRunContext) -> Any:
            if not validator.is_valid(args):
                validator.raise_invalid(args)
            return await body(args, ctx)

        wrapper: Execute = execute_async
    else:

        def execute_sync(args: Any, ctx: ToolRunContext) -> Any:
            if not validator.is_valid(args):
                validator.raise_invalid(args)
            return body(args, ctx)

        wrapper = execute_sync
    _label(wrapper, name, "execute", body)
    wrapper.__qualname__ = f"ToolDefinition({name!r}, schema_mode='full').execute"
    return wrapper


def _output_path(violation: str) -> str:
    """Root a DSL violation's ``spec`` path at ``output.schema``, where the
    author wrote it."""
    if violation.startswith("spec") and violation[4:5] in (".", "[", ":"):
        return "output.schema" + violation[4:]
    return f"output.schema: {violation}"


def _validating_execute(name: str, validator: CompiledJsonSchema, body: Execute) -> Execute:
    # Hot path: one compiled is_valid call, messages built only when invalid.
    is_valid = validator.is_valid

    def reject(args: Any) -> ToolArgsError:
        validate_args(validator, args)  # raises with every violation
        return ToolArgsError([f'"value" does not match the parameters of tool "{name}"'])  # pragma: no cover

    if is_async_callable(body):

        async def execute_async(args: Any, ctx: ToolRunContext) -> Any:
            if not is_valid(args):
                raise reject(args)
            return await body(args, ctx)

        wrapper: Execute = execute_async
    else:

        def execute_sync(args: Any, ctx: ToolRunContext) -> Any:
            if not is_valid(args):
                raise reject(args)
            return body(args, ctx)

        wrapper = execute_sync
    _label(wrapper, name, "execute", body)
    return wrapper


def guarded_callbacks(
    name: str,
    validator: _Validates,
    *,
    is_concurrency_safe: Classifier | None,
    present_call: PresentCall | None,
    present_result: PresentResult | None,
) -> tuple[Classifier | None, PresentCall | None, PresentResult | None]:
    """The classifier and the presenters wrapped the way :func:`define_tool`
    wraps them: ``False`` / ``None`` on arguments ``validator`` rejects or
    when the callback raises, never an exception. ``None`` stays ``None``."""
    return (
        None if is_concurrency_safe is None else _classifier(name, validator, is_concurrency_safe),
        None if present_call is None else _call_presenter(name, validator, present_call),
        None if present_result is None else _result_presenter(name, validator, present_result),
    )


def _guarded_requires_approval(name: str, validator: _Validates, requires_approval: bool | Classifier) -> Any:
    """``requires_approval`` as a definition holds it: a bool (or anything
    that is not callable, for registration to refuse) as it is; a
    predicate wrapped the way :func:`define_tool` wraps it, answering
    ``False`` without calling it on arguments ``validator`` rejects (the
    body will not run: the call fails ``INVALID_ARGS``). What it raises is
    not caught: the pipeline fails the call, naming the tool."""
    if not callable(requires_approval):
        return requires_approval
    is_valid = validator.is_valid

    def predicate(args: Any) -> bool:
        return is_valid(args) and requires_approval(args)

    _label(predicate, name, "requires_approval", requires_approval)
    return predicate


def _classifier(name: str, validator: _Validates, classifier: Classifier) -> Classifier:
    is_valid = validator.is_valid

    def is_concurrency_safe(args: Any) -> bool:
        try:
            if not is_valid(args):
                return False
            return classifier(args)
        except BaseException as err:  # noqa: BLE001 - a raising classifier means exclusive
            classifier_failed(name, err)
            return False

    _label(is_concurrency_safe, name, "is_concurrency_safe", classifier)
    return is_concurrency_safe


def classifier_failed(name: str, err: BaseException) -> None:
    """A classifier raised (its call runs exclusive): a WARNING naming the
    tool, the error and the likely fix the first time it raises this kind
    of error (:func:`first_failure`), DEBUG after that. The one rule for
    every classifier: the guarded ones (``define_tool``, ``@tool``, full
    mode) and a raw definition's (``visibility.definition_mode``)."""
    if not first_failure(name, "is_concurrency_safe", type(err).__qualname__):
        logger.debug("tool {!r}: is_concurrency_safe raised {}; the call runs exclusive", name, exception_text(err))
        return
    logger.warning(
        'tool "{}": is_concurrency_safe (@tool\'s concurrency_safe) raised {}, so its call runs exclusive; it '
        'gets the arguments as frozen JSON, not typed values (args["path"], not args.path): fix it to answer '
        "True or False for any valid arguments",
        name,
        exception_text(err),
    )


def _call_presenter(name: str, validator: _Validates, presenter: PresentCall) -> PresentCall:
    is_valid = validator.is_valid

    def present_call(args: Any) -> ToolCallView | None:
        return checked_view(name, "present_call", ToolCallView, presenter, (args,), is_valid)

    _label(present_call, name, "present_call", presenter)
    return present_call


def _result_presenter(name: str, validator: _Validates, presenter: PresentResult) -> PresentResult:
    is_valid = validator.is_valid

    def present_result(args: Any, result: PresentedResult) -> ToolResultView | None:
        return checked_view(name, "present_result", ToolResultView, presenter, (args, result), is_valid)

    _label(present_result, name, "present_result", presenter)
    return present_result


def _label(wrapper: Any, name: str, role: str, original: object) -> None:
    """Name a wrapper after its tool and keep the author's callable
    reachable as ``__wrapped__``."""
    wrapper.__name__ = role
    wrapper.__qualname__ = f"define_tool({name!r}).{role}"
    wrapper.__wrapped__ = original
    setattr(wrapper, _GUARDED, True)


_GUARDED: Final = "__dsh_guarded__"


def _guard_own(defn: ToolDefinition, own: OwnValidators) -> None:
    """Guard the classifier, the presenters and a ``requires_approval``
    predicate of a definition whose ``execute`` brings its own validators,
    as :func:`define_tool` guards them: the classifier and presenters
    ``@tool`` made are guarded already; its predicate, and one a
    ``dataclasses.replace`` put in, are wrapped here."""
    name = defn.name if type(defn.name) is str else "<unnamed>"
    given = {
        key: fn
        for key in ("is_concurrency_safe", "present_call", "present_result", "requires_approval")
        if callable(fn := getattr(defn, key)) and not getattr(fn, _GUARDED, False)
    }
    if not given:
        return
    if "requires_approval" in given:
        object.__setattr__(
            defn, "requires_approval", _guarded_requires_approval(name, own.parameters, given["requires_approval"])
        )
    classifier, present_call, present_result = guarded_callbacks(
        name,
        own.parameters,
        is_concurrency_safe=given.get("is_concurrency_safe"),
        present_call=given.get("present_call"),
        present_result=given.get("present_result"),
    )
    for key, wrapper in (
        ("is_concurrency_safe", classifier),
        ("present_call", present_call),
        ("present_result", present_result),
    ):
        if wrapper is not None:
            object.__setattr__(defn, key, wrapper)
