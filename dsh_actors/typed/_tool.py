"""``@tool``: a :class:`~dsh_actors.ToolDefinition` from a typed function."""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import CoroutineType, UnionType
from typing import Annotated, Any, Final, overload

from pydantic import ConfigDict, Field, PydanticUserError, TypeAdapter, ValidationError, create_model
from pydantic.errors import PydanticSchemaGenerationError
from pydantic.fields import FieldInfo
from pydantic.json_schema import PydanticJsonSchemaWarning
from pydantic_core import PydanticSerializationError, PydanticUndefined

from ..definition import (
    OWN_VALIDATORS,
    OwnValidators,
    PresentationMeta,
    PresentCall,
    PresentResult,
    Render,
    ToolDefinition,
    ToolOutput,
    _name_problem,
    constant_classifier,
    default_text,
    guarded_callbacks,
    reserved_name_problem,
    validate_definition,
)
from ..errors import DshError, InvalidTypeError, LosslessJsonError, RegistrationError, ToolOutputError, safe_str
from ..execution import ToolRunContext
from ..json import check_lossless, dumps, materialize
from ..json._rules import value_problem
from ..model import ContentBlock, content_from_json
from ..schema import args_error
from ._docstrings import parse_docstring
from ._pydantic import (
    PydanticEnforcer,
    ToolJsonSchema,
    bytes_error,
    json_validator,
    serialization_error,
    without_negative_zero,
)

__all__ = ["TypedToolDefinition", "tool"]

_Function = Callable[..., Any]
_NO_DEFAULT: Final = inspect.Parameter.empty
_VARIADIC: Final = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


@dataclass(frozen=True, eq=False, kw_only=True, slots=True)
class TypedToolDefinition(ToolDefinition):
    """The :class:`~dsh_actors.ToolDefinition` :func:`tool` makes: a
    definition like any other (same fields; ``dataclasses.replace`` gives
    another of this class) that is also callable as the function it was
    made of. Only this kind of definition is callable (``callable(defn)``);
    any other has only ``execute(args, ctx)``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function, as written: ``add(1, 2)`` is the
        undecorated ``add(1, 2)`` (no validation; a context parameter gets
        what you pass, and an ``async def`` gives its coroutine), so a unit
        test calls the tool directly. A copy whose ``execute`` was replaced
        (``dataclasses.replace(defn, execute=...)``) has no function to
        call: it raises :class:`~dsh_actors.InvalidTypeError` saying how to
        run it."""
        own = getattr(self.execute, OWN_VALIDATORS, None)
        if type(own) is not OwnValidators:
            name = safe_str(self.name) if type(self.name) is str else "<unnamed>"
            raise InvalidTypeError(
                f'tool "{name}" has an execute that @tool did not make, so there is no function to call: run it as '
                f'the model would, rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c1", name="{name}", '
                "arguments={...})]))"
            )
        return own.function(*args, **kwargs)


@overload
def tool(fn: _Function, /) -> TypedToolDefinition: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: bool | Callable[[Any], bool] | None = None,
    timeout_ms: float | None = None,
    idempotent: bool = False,
    requires_approval: bool | Callable[[Any], bool] = False,
    meta: Mapping[str, Any] | None = None,
    render: Render | None = None,
    presentation_meta: PresentationMeta | None = None,
    present_call: PresentCall | None = None,
    present_result: PresentResult | None = None,
) -> Callable[[_Function], TypedToolDefinition]: ...


def tool(
    fn: _Function | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: bool | Callable[[Any], bool] | None = None,
    timeout_ms: float | None = None,
    idempotent: bool = False,
    requires_approval: bool | Callable[[Any], bool] = False,
    meta: Mapping[str, Any] | None = None,
    render: Render | None = None,
    presentation_meta: PresentationMeta | None = None,
    present_call: PresentCall | None = None,
    present_result: PresentResult | None = None,
) -> TypedToolDefinition | Callable[[_Function], TypedToolDefinition]:
    """Make a tool of a plain or ``async def`` function with type hints.

    ``@tool`` or ``@tool(name=..., description=..., ...)`` returns a
    :class:`TypedToolDefinition` (a :class:`~dsh_actors.ToolDefinition`
    that is callable as the function), ready to register:

    * ``name``: the function's name (a lambda's, or one the model APIs
      refuse, is refused, naming ``@tool(name=...)``); ``description``: its docstring without
      the sections about the signature (the parameters, and ``Returns``,
      ``Yields``, ``Raises``), every other one (``Note:``, ``Example:``,
      ``Warning:``...) kept where it is; each parameter's description: its
      entry in the docstring's ``Args:`` (Google; ``Keyword Args:`` and
      ``Other Parameters:`` too), ``Parameters`` (NumPy) or ``:param x:``
      (Sphinx) section. A ``Field(description=...)`` in the hint wins.
    * The parameters: one property per parameter, its JSON Schema generated
      by pydantic from the hint (builtins, ``list[...]``, ``dict[str,
      ...]``, ``Literal``, ``Enum``, ``X | None``, ``Annotated[...,
      Field(ge=..., pattern=...)]``, pydantic models, dataclasses,
      ``TypedDict``...; no hint: any JSON value), named as the parameter or
      as the hint's ``Field(alias=...)`` says (``from_: Annotated[str,
      Field(alias="from")]`` is ``"from"``). A parameter with a default
      is optional (a default JSON cannot carry, such as a sentinel
      ``object()``, is left out of the schema, whatever the warning
      filters, and the function gets it when the model leaves the
      parameter out; a default the schema shows that its own parameter
      refuses, ``n: Annotated[int, Field(le=10)] = 20``, is refused here,
      as pydantic does not check defaults; ``limit: int = None`` is the
      implicit-optional idiom and runs as written: left out or sent as
      ``null`` by a strict model, the function gets None); unknown
      arguments are refused (``additionalProperties: false``). A parameter
      annotated :class:`~dsh_actors.ToolRunContext`
      (or ``ToolRunContext[Deps]``, which types ``ctx.deps``) gets the
      call's context and is not offered to the model.
    * The arguments are validated by pydantic-core (the validator is built
      here, once) inside the body's step: invalid ones fail ``INVALID_ARGS``
      naming each path (``"value.point.x" must be an integer``) and the
      function does not run; so does a float that is NaN or infinite
      (lax mode reads the text ``"inf"`` as one), wherever it is, whatever
      its type's config says. The function gets typed values (a model
      instance for a model, a ``list`` for a list), never frozen mappings.
    * The return annotation is the output schema (serialization mode; no
      annotation: any JSON value). The returned value is validated against
      it and turned into lossless JSON (a model dumped in JSON mode, by
      alias, as the output schema shows it: ``Field(alias="firstName")``
      is ``"firstName"``); a
      value that does not fit fails ``INVALID_TOOL_OUTPUT`` (a part JSON
      cannot carry named by its path and type, the fix in the exception's
      note: an exception returned, to raise it).
    * A return annotation that is content, a content block (``->
      ImageBlock``), a union of them (``TextBlock | ImageBlock``) or a
      list of those (``-> list[TextBlock | ImageBlock]``), is sent to the
      model as those blocks (without ``render``; the value is still their
      JSON form), so a returned image reaches the model as an image.

    The definition is in full schema mode with pydantic-core as its
    enforcer (``dataclasses.replace`` keeps that as long as it keeps
    ``parameters`` and ``output``). The other options are
    :class:`~dsh_actors.ToolDefinition`'s: ``concurrency_safe`` is
    ``is_concurrency_safe`` (a bool is a constant; a callable gets the
    arguments as frozen JSON, ``args["q"]["path"]``, not the typed values,
    and answers ``False`` on invalid ones, like the presenters, which
    answer ``None``; one that raises runs the call exclusive, logged at
    WARNING the first time per tool and kind of error); ``idempotent`` (may
    the body run again for a call that a crash interrupted, see
    ``rt.tools.recover``), ``requires_approval`` (a bool, or a predicate
    that gets the arguments as frozen JSON, like the classifier, and
    answers ``False`` on invalid ones: a call that needs it
    runs only once the approval service allows it, see
    ``ToolDefinition.requires_approval``) and ``timeout_ms`` are never shown
    to the model; ``render`` and
    ``presentation_meta`` are :class:`~dsh_actors.ToolOutput`'s and get the
    arguments and the value as frozen JSON (no ``render``: content blocks
    as they are, see above, a ``str`` as it is, anything else as compact
    JSON text). Calling the definition calls
    the original function as written (``add(1, 2)``: no validation, a
    context parameter gets what is passed), so a unit test calls the tool
    directly; the function is also ``definition.execute.__wrapped__``. No
    other definition is callable.

    ``definition.execute`` pickles as what it was made of, never as its
    validators: the execute of a module-level definition (``module.qualname``
    of the function is this definition) as that reference, any other as the
    function, its resolved hints and the tool's name, decorated again where
    it is loaded. So cloudpickle takes it (a ``RayExecutor`` ships it), and
    plain :mod:`pickle` the first kind, and the second when the function
    pickles by reference. Either way the copy validates and behaves as the
    original; ``copy.copy`` and ``copy.deepcopy`` give it back itself.

    Raises :class:`~dsh_actors.RegistrationError` naming the tool and the
    fix for what cannot become a tool (``*args``; ``*args`` with
    ``**kwargs``, a decorator's wrapper: ``functools.wraps``; a hint pydantic cannot
    validate or describe, an annotation that does not resolve, the name
    given positionally: ``@tool("x")``; ``@tool`` above ``@classmethod`` or
    ``@staticmethod``; two parameters offered as one name; a default its
    parameter refuses) and for anything registration
    would reject (the reserved name ``run_code`` included). A plain
    function runs on a call actor's worker thread; an ``async def`` on the
    batch's event loop.
    """
    options = _Options(
        name=name,
        description=description,
        concurrency_safe=concurrency_safe,
        timeout_ms=timeout_ms,
        idempotent=idempotent,
        requires_approval=requires_approval,
        meta=meta,
        render=render,
        presentation_meta=presentation_meta,
        present_call=present_call,
        present_result=present_result,
    )
    # The decorating frame's locals resolve hints that name local classes.
    caller = sys._getframe(1)
    localns = dict(caller.f_locals) if caller.f_code.co_name != "<module>" else None
    if fn is None:

        def decorate(function: _Function) -> TypedToolDefinition:
            return _build(function, options, localns)

        return decorate
    return _build(fn, options, localns)


class _Options(typing.NamedTuple):
    # (The defaults are tool()'s: a rebuilt execute, see _ToolExecute, needs only the name.)
    name: str | None
    description: str | None = None
    concurrency_safe: bool | Callable[[Any], bool] | None = None
    timeout_ms: float | None = None
    idempotent: bool = False
    requires_approval: bool | Callable[[Any], bool] = False
    meta: Mapping[str, Any] | None = None
    render: Render | None = None
    presentation_meta: PresentationMeta | None = None
    present_call: PresentCall | None = None
    present_result: PresentResult | None = None


def _is_context(hint: Any) -> bool:
    """Whether ``hint`` asks for the call's context: ``ToolRunContext``,
    ``ToolRunContext[Deps]``, either inside ``Annotated[...]``."""
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    return hint is ToolRunContext or typing.get_origin(hint) is ToolRunContext


def _context_in_union(hint: Any) -> bool:
    """Whether ``hint`` is a union with the context in it (``ToolRunContext
    | None``, ``Optional[ToolRunContext]``), maybe inside ``Annotated``:
    neither the context (which is always given) nor a type to offer."""
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) not in (typing.Union, UnionType):
        return False
    return any(_is_context(member) for member in typing.get_args(hint))


#: The content blocks a return annotation may name to be sent as content.
_BLOCKS: Final = frozenset(typing.get_args(ContentBlock))


def _is_content(returns: Any) -> bool:
    """Whether the return annotation is content for the model: a content
    block (``ImageBlock``, ``TextBlock``, ``ReasoningBlock``), a union of
    them (``TextBlock | ImageBlock``), or a ``list``, ``tuple`` or
    ``Sequence`` of those, maybe inside ``Annotated``; or any of these or
    ``None`` (``ImageBlock | None``, ``Optional[list[ImageBlock]]``)."""
    if typing.get_origin(returns) is Annotated:
        returns = typing.get_args(returns)[0]
    if typing.get_origin(returns) in (typing.Union, UnionType):
        members = [member for member in typing.get_args(returns) if member is not type(None)]
        if len(members) == 1:  # (one annotation or None)
            return _is_content(members[0])
        return all(_is_block(member) for member in members)
    if typing.get_origin(returns) in (list, tuple, Sequence):
        items = [item for item in typing.get_args(returns) if item is not Ellipsis]
        return bool(items) and all(_is_block(item) for item in items)
    return _is_block(returns)


def _is_block(hint: Any) -> bool:
    """Whether ``hint`` is a content block or a union of them."""
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, UnionType):
        return all(_is_block(member) for member in typing.get_args(hint))
    return hint in _BLOCKS


def _render_content(args: Any, value: Any) -> list[ContentBlock]:
    """The default ``render`` of a tool whose return annotation is content
    (see :func:`_is_content`): the value, a block's JSON form or a list of
    them, validated already, as those blocks, so an image reaches the
    model as an image rather than as JSON text holding its base64; None
    (an optional one's) as for a tool without ``render`` (the text ``null``)."""
    if value is None:
        return [default_text(value)]
    return list(content_from_json(value if type(value) is tuple else (value,), "value"))


def _function_name_problem(name: str) -> str:
    """Why the function's name cannot name the tool, and the fix: a name
    given to ``@tool``."""
    if name == "<lambda>":
        return (
            'a lambda has no name the model APIs accept ("<lambda>"): name the tool, '
            'tool(name="my_tool")(lambda ...), or define the function with def'
        )
    suggested = "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in name)[:64]
    return f'{_name_problem(name)}: @tool(name="{suggested or "my_tool"}")'


def _alias(hint: Any) -> str | None:
    """The property name a ``Field(alias=...)`` in ``hint`` asks for (the
    last one), or None."""
    if typing.get_origin(hint) is not Annotated:
        return None
    aliases = [m.alias for m in typing.get_args(hint)[1:] if isinstance(m, FieldInfo) and type(m.alias) is str]
    return aliases[-1] if aliases else None


def _described(hint: Any) -> bool:
    """Whether ``hint`` carries a ``Field(description=...)`` of its own."""
    if typing.get_origin(hint) is not Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in typing.get_args(hint)[1:])


def _build(
    fn: _Function, options: _Options, localns: dict[str, Any] | None, hints: dict[str, Any] | None = None
) -> TypedToolDefinition:
    """The definition of ``fn``; ``hints``: its type hints resolved already
    (a rebuilt execute's, see :class:`_ToolExecute`), else resolved here
    with ``localns``."""
    if isinstance(fn, ToolDefinition):
        raise RegistrationError("@tool was applied twice (this is a ToolDefinition already)", tool=fn.name)
    given: object = fn  # (typed a function; @tool("x") passes the name)
    if type(given) is str:
        raise RegistrationError(
            f"@tool takes the tool's name as a keyword: @tool(name={given!r}), not @tool({given!r})"
        )
    if isinstance(given, (classmethod, staticmethod)):  # (@tool above either, in a class body)
        method = getattr(given.__func__, "__name__", None)
        fix = (
            "a classmethod, which has no class to be bound to yet: make the tool of it once the class exists, "
            f"tool(MyClass.{method})"
            if isinstance(given, classmethod)
            else "a staticmethod: write @staticmethod above @tool (or decorate the plain function)"
        )
        raise RegistrationError(f"@tool got {fix}", tool=safe_str(method) if method else None)
    if not callable(fn):
        raise RegistrationError(f"@tool decorates a function (got {type(fn).__qualname__})")
    label = getattr(fn, "__name__", None)
    name = options.name if options.name is not None else label
    shown = name if type(name) is str and name else safe_str(label or type(fn).__qualname__)

    def refuse(problem: str) -> RegistrationError:
        return RegistrationError(problem, tool=shown)

    reserved = reserved_name_problem(name)
    if reserved is not None:
        raise refuse(reserved)
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        kind = "an async generator" if inspect.isasyncgenfunction(fn) else "a generator"
        raise refuse(
            f"@tool needs a function that returns its value, not {kind}: collect what it yields and return that "
            "(a list, or the text joined), one value for the call"
        )
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        raise refuse(
            f"@tool decorates a function defined with def or async def, not a {type(fn).__qualname__}; "
            "write a function that calls it, with the parameters and types the model should see"
        )
    if options.name is None and type(name) is str and _name_problem(name) is not None:
        raise refuse(_function_name_problem(name))
    try:
        signature = inspect.signature(fn)
        if hints is None:
            hints = typing.get_type_hints(fn, localns=localns, include_extras=True)
    except (NameError, TypeError, ValueError, SyntaxError, AttributeError) as err:
        if isinstance(err, SyntaxError):
            fix = "write each string annotation as a Python expression"  # ("list[int")
        elif isinstance(err, NameError) and type(err.name) is str:
            fix = (
                f"define {err.name} before the function, where its module sees it (@tool reads the annotations "
                "as it decorates the function: a class defined below it is not there yet), or import it"
            )
        else:
            fix = "define the types it names where the function's module can see them"
        raise refuse(f"cannot read the function's signature and type hints ({safe_str(err)}); {fix}") from None
    docs = parse_docstring(fn)

    fields: dict[str, Any] = {}
    offered: dict[str, str] = {}  # property -> its parameter
    by_name: list[tuple[str, str]] = []  # (parameter, field), keyword-passed
    positional: list[str | None] = []  # fields of positional-only parameters; None: the context
    context: str | None = None
    context_positional = False
    variadic = {p.kind: p.name for p in signature.parameters.values() if p.kind in _VARIADIC}
    if len(variadic) == 2:
        args_name, kwargs_name = variadic[inspect.Parameter.VAR_POSITIONAL], variadic[inspect.Parameter.VAR_KEYWORD]
        raise refuse(
            f"parameters *{args_name} and **{kwargs_name} cannot be offered to a model; if this is a decorator's "
            "wrapper, which hides the signature of the function it wraps, decorate the wrapper with "
            "@functools.wraps(fn) in the decorator, so @tool sees the wrapped function's name, parameters and "
            f"docstring; else take a list ({args_name}: list[str]) and one parameter holding the options "
            f"({kwargs_name}: Options, a pydantic model or TypedDict)"
        )
    for index, param in enumerate(signature.parameters.values()):
        if param.kind in _VARIADIC:
            fix = (
                f"take a list instead ({param.name}: list[str])"
                if param.kind is param.VAR_POSITIONAL
                else f"take one parameter holding them ({param.name}: Options, a pydantic model or TypedDict whose "
                "fields are the options, or a dict[str, ...])"
            )
            raise refuse(f"parameter {param.name!r}: *args and **kwargs cannot be offered to a model; {fix}")
        hint = hints.get(param.name, Any)
        if index == 0 and param.name in ("self", "cls") and param.name not in hints and not inspect.ismethod(fn):
            raise refuse(
                f"parameter {param.name!r} would be offered to the model: @tool got a method of a class, not "
                f"bound to an instance; make the tool of the bound method (tool(instance.method)) instead"
            )
        if param.name in ("ctx", "context") and param.name not in hints and context is None:
            # (Offered to the model as a required parameter of any value, it
            # would never get the call's context: almost surely not meant.)
            raise refuse(
                f"parameter {param.name!r} has no annotation, so it would be offered to the model: annotate it "
                f"{param.name}: ToolRunContext to get the call's context (or give it a type to offer it)"
            )
        if _context_in_union(hint):
            raise refuse(
                f"parameter {param.name!r} is annotated with a union that holds ToolRunContext (such as "
                f"ToolRunContext | None): annotate it {param.name}: ToolRunContext (or ToolRunContext[Deps]); the "
                "call's context is always given, never None"
            )
        if _is_context(hint):
            if context is not None:
                raise refuse(f"parameters {context!r} and {param.name!r} both ask for the ToolRunContext")
            context = param.name
            context_positional = param.kind is param.POSITIONAL_ONLY
            if context_positional:
                positional.append(None)
            continue
        field = f"p{index}"  # never shadows a BaseModel attribute; the alias is the name offered
        default = PydanticUndefined if param.default is _NO_DEFAULT else param.default
        if isinstance(default, FieldInfo):
            # ``x: int = Field(3, ge=0)`` (as pydantic's validate_call takes it): its default,
            # constraints and description are the hint's, not a FieldInfo as the value.
            hint, default = Annotated[hint, default], PydanticUndefined
        description = None if _described(hint) else docs.parameters.get(param.name)
        # Only what is given: an explicit description=None would erase the hint's own.
        extra: dict[str, Any] = {} if description is None else {"description": description}
        # The property: the parameter's name, or the alias its Field gives (``from_: Annotated[str,
        # Field(alias="from")]``), which the Field given here would otherwise override.
        shown_as = _alias(hint) or param.name
        if shown_as in offered:
            raise refuse(
                f"parameters {offered[shown_as]!r} and {param.name!r} are both offered to the model as "
                f'"{shown_as}" (Field(alias=...)); give each its own name'
            )
        offered[shown_as] = param.name
        fields[field] = (hint, Field(default, alias=shown_as, **extra))
        if param.kind is param.POSITIONAL_ONLY:
            positional.append(field)
        else:
            by_name.append((param.name, field))

    returns = hints.get("return", Any) if signature.return_annotation is not _NO_DEFAULT else Any
    try:
        arguments_model = create_model(f"{label or 'tool'}_arguments", __config__=_ARGUMENTS_CONFIG, **fields)
        parameters_schema = arguments_model.model_json_schema(schema_generator=ToolJsonSchema, mode="validation")
        parameters_schema.pop("title", None)
        output_adapter, dump = _output_adapter(returns)
        output_schema = output_adapter.json_schema(schema_generator=ToolJsonSchema, mode="serialization")
    except (PydanticSchemaGenerationError, PydanticUserError, PydanticJsonSchemaWarning, TypeError) as err:
        raise refuse(_type_problem(err, fields, returns)) from None
    try:
        parameters: Any = materialize(parameters_schema, "parameters")
        output_json_schema = materialize(output_schema, "output.schema")
    except DshError as err:
        raise refuse(f"the generated schema is not lossless JSON ({err.message}); check the defaults") from None

    arguments_core = arguments_model.__pydantic_core_schema__
    arguments = PydanticEnforcer(json_validator(arguments_core), parameters, hand_over=True, core=arguments_core)
    refused = _refused_default(parameters, arguments, offered)
    if refused is not None:
        raise refuse(refused)
    output_core = output_adapter.core_schema
    output = PydanticEnforcer(json_validator(output_core, dumped=True), output_json_schema, core=output_core)
    body = _execute(
        shown,
        fn,
        arguments,
        output_adapter,
        output,
        dump,
        tuple(by_name),
        tuple(positional),
        context,
        context_positional,
    )
    execute = _ToolExecute(body, shown, (fn, options.name, hints))
    setattr(execute, OWN_VALIDATORS, OwnValidators(parameters=arguments, output=output, function=fn))

    safe = options.concurrency_safe
    classifier = constant_classifier(safe) if type(safe) is bool else safe
    if classifier is not None and not callable(classifier):
        raise refuse(f"concurrency_safe must be a bool, a callable or None (got {type(classifier).__qualname__})")
    is_concurrency_safe, present_call, present_result = guarded_callbacks(
        shown,
        arguments,
        is_concurrency_safe=classifier,
        present_call=options.present_call,
        present_result=options.present_result,
    )
    definition = TypedToolDefinition(
        name=name,  # type: ignore[arg-type]  # registration's check names a bad one
        description=options.description if options.description is not None else docs.description,
        parameters=parameters,
        output=ToolOutput(
            schema=output_json_schema,
            render=_render_content if options.render is None and _is_content(returns) else options.render,
            presentation_meta=options.presentation_meta,
        ),
        execute=execute,
        is_concurrency_safe=is_concurrency_safe,
        timeout_ms=options.timeout_ms,
        idempotent=options.idempotent,
        requires_approval=options.requires_approval,  # a predicate is guarded by the definition (full mode)
        present_call=present_call,
        present_result=present_result,
        meta=options.meta,
        schema_mode="full",
    )
    checked = validate_definition(definition)  # every problem registration would name, now
    object.__setattr__(definition, "_checked", checked)
    return definition


#: The arguments model's config: no property the parameters do not declare.
#: (No float is NaN or infinite either, wherever it is and whatever its
#: type's config says: the validator is :func:`json_validator`'s.)
_ARGUMENTS_CONFIG: Final = ConfigDict(extra="forbid")


#: Serialization keeps a non-finite float as it is, for the lossless JSON
#: check to refuse (as it refuses one from any tool, and as pydantic's dump
#: keeps one that a ``float`` holds): by default pydantic dumps one that an
#: ``Any`` holds as null, silently.
_KEEP_NON_FINITE: Final = ConfigDict(ser_json_inf_nan="constants")


#: Lossless JSON's refusal of -0.0 (see :func:`without_negative_zero`).
_NEGATIVE_ZERO: Final = value_problem(-0.0)


def _refused_default(parameters: Any, arguments: PydanticEnforcer, offered: Mapping[str, str]) -> str | None:
    """Why a default the schema shows is one its own parameter refuses
    (``n: Annotated[int, Field(le=10)] = 20``), with the fix, or None. A
    ``None`` default is the implicit-optional idiom (``limit: int = None``),
    not checked: the function gets None when the model leaves the parameter
    out, and a strict model's ``null`` for it is dropped before validation
    (``absent_null_plan``), so it works as written. pydantic does not validate a default (unless
    ``validate_default``), so the schema would offer the model a value the
    tool refuses when sent, and a call that leaves it out would run with it
    unchecked. Checked once, here: the defaults the schema shows, as JSON
    (what the model reads), validated as the arguments are."""
    properties = parameters.get("properties")
    shown = {
        prop: spec["default"]
        for prop, spec in (properties.items() if isinstance(properties, Mapping) else ())
        if isinstance(spec, Mapping) and spec.get("default") is not None
    }
    if not shown:
        return None
    probe = materialize(shown)
    try:
        arguments.parse(probe)
    except ValidationError as err:
        failing = {error["loc"][0] for error in err.errors(include_url=False) if error["loc"]}
        problems = [_default_problem(err, probe, arguments, prop, offered[prop]) for prop in shown if prop in failing]
        if problems:
            return (
                "; ".join(problems) + " (pydantic does not check defaults: the schema would offer the model a "
                "default the tool rejects when sent, and a call that leaves the parameter out would run with it "
                "unchecked)"
            )
    return None


def _default_problem(err: ValidationError, probe: Any, arguments: PydanticEnforcer, prop: str, param: str) -> str:
    """Parameter ``param``'s refusal of its default (``probe[prop]``, which
    ``err`` found invalid), and the fix."""
    default = probe[prop]
    why = "; ".join(arguments.violations(err, probe, "value", under=(prop,)))
    return (
        f"parameter {param!r} has the default {dumps(default).decode()}, which it refuses itself ({why}): give it "
        "a default it accepts, or loosen its type or constraint to take this one"
    )


def _output_adapter(returns: Any) -> tuple[TypeAdapter[Any], Callable[[Any], Any]]:
    """The return annotation's adapter (its schema and validator) and the
    JSON-mode dump of a valid value, with :data:`_KEEP_NON_FINITE`, by alias:
    each field under the name the output schema (serialization mode) shows,
    its serialization alias or alias (``Field(alias="firstName")``), as
    FastAPI dumps a response model."""
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(returns, config=_KEEP_NON_FINITE)
    except PydanticUserError:
        # A model, dataclass or TypedDict has a config of its own: the
        # dumper's config is then a one-item tuple's (the outer one rules).
        adapter = TypeAdapter(returns)
        in_tuple = TypeAdapter(tuple[returns], config=_KEEP_NON_FINITE).serializer.to_python

        def dump_in_tuple(value: Any) -> Any:
            return in_tuple((value,), mode="json", by_alias=True)[0]

        return adapter, dump_in_tuple
    return adapter, functools.partial(adapter.serializer.to_python, mode="json", by_alias=True)


def _type_problem(err: Exception, fields: Mapping[str, tuple[Any, FieldInfo]], returns: Any) -> str:
    """Why pydantic refused the function's types, naming the parameter (or
    the return value) whose annotation it cannot take, without pydantic's
    advice about its own configuration."""
    culprit: str | None = None
    for hint, info in fields.values():
        try:
            TypeAdapter(hint).json_schema(schema_generator=ToolJsonSchema, mode="validation")
        except Exception:  # noqa: BLE001 - pydantic's schema errors
            culprit = f"parameter {info.alias!r}"
            break
    if culprit is None:
        try:
            TypeAdapter(returns).json_schema(schema_generator=ToolJsonSchema, mode="serialization")
        except Exception:  # noqa: BLE001
            culprit = "the return annotation"
    first = safe_str(err).split("\n", 1)[0]
    first = first.split(". Set `arbitrary_types_allowed", 1)[0].rstrip(".")
    fix = (
        "annotate it with types that JSON can carry (int, float, str, bool, None, lists, dicts, Literal, "
        "enums, a BaseModel, a dataclass or a TypedDict of those)"
    )
    if culprit == "the return annotation":
        fix += ", and return what the model needs to know of the object (its text, a dict of its fields)"
    else:
        fix += "; the run context is a parameter annotated exactly ToolRunContext (or ToolRunContext[Deps])"
    where = "" if culprit is None else f"{culprit}: "
    if getattr(err, "code", None) == "typed-dict-version":  # (pydantic takes typing's only from Python 3.12)
        return (
            f"{where}pydantic cannot validate a typing.TypedDict on Python < 3.12; define it with "
            "typing_extensions.TypedDict (from typing_extensions import TypedDict)"
        )
    return f"{where}pydantic cannot validate or describe this type ({first}); {fix}"


def _execute(
    name: str,
    fn: _Function,
    arguments: PydanticEnforcer,
    output: TypeAdapter[Any],
    checked: PydanticEnforcer,
    dump: Callable[[Any], Any],
    by_name: tuple[tuple[str, str], ...],
    positional: tuple[str | None, ...],
    context: str | None,
    context_positional: bool,
) -> Any:
    """The body the runtime calls as ``execute(args, ctx)``: arguments
    validated into typed values, the function called with them, its value
    validated and dumped as JSON (``checked``: the output's enforcer, built
    from ``output``'s core schema, tells a value's violations)."""
    parse = arguments.parse
    # pydantic-core's own validator and serializer (``dump``, see
    # _output_adapter): TypeAdapter's methods forward to them with their
    # defaults, at four times the cost.
    validate_value = output.validator.validate_python

    def call_with(args: Any, ctx: ToolRunContext) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # Hot path: one pydantic-core call; messages only when invalid.
        try:
            model = parse(args)
        except ValidationError as err:
            # (Text that is not JSON: what is wrong with it and where, as for
            # any tool, not that "value" must be an object.)
            raise args_error(args, arguments.violations(err, args)) from None
        values = model.__dict__
        kwargs = {param: values[field] for param, field in by_name}
        if context is not None and not context_positional:
            kwargs[context] = ctx
        if not positional:
            return (), kwargs
        return tuple(ctx if field is None else values[field] for field in positional), kwargs

    def to_json(value: Any) -> Any:
        try:
            # (The value is the function's, a Python object: a dict for a
            # TypedDict or a model has its fields' names for keys, by_name.)
            out = dump(validate_value(value, by_name=True))
        except ValidationError as err:
            violations = checked.violations(err, value)
            if value is None:
                violations.append(f"{getattr(fn, '__name__', name)} returned None: is a return statement missing?")
            raise ToolOutputError(name, violations) from None
        except UnicodeDecodeError:  # (pydantic writes bytes as UTF-8 text)
            raise bytes_error(name) from None
        except (PydanticSerializationError, ValueError, TypeError, RecursionError) as err:
            # The serializer's own complaints, and what it lets through from
            # the value: bytes that are not UTF-8, a cycle, nesting past its
            # depth limit.
            raise serialization_error(name, value, err) from None
        # -0.0, which arithmetic makes, is returned as 0.0; anything else
        # the pipeline refuses as for any tool. Found with the walk the
        # pipeline would make anyway where it can take the result as it is
        # (a dict frozen; a scalar), else (a list: the pipeline walks the
        # tuple made of it again) with a walk that builds nothing.
        try:
            if type(out) is not list:
                return materialize(out, "value")
            check_lossless(out, "value")
        except LosslessJsonError as err:
            return without_negative_zero(out) if err.problem == _NEGATIVE_ZERO else out
        return out

    wrapper: Any
    if inspect.iscoroutinefunction(fn):

        async def execute_async(args: Any, ctx: ToolRunContext) -> Any:
            positional_args, kwargs = call_with(args, ctx)
            return to_json(await fn(*positional_args, **kwargs))

        wrapper = execute_async
    else:

        async def finish(coro: Any) -> Any:
            return to_json(await coro)

        def execute_sync(args: Any, ctx: ToolRunContext) -> Any:
            positional_args, kwargs = call_with(args, ctx)
            value = fn(*positional_args, **kwargs)
            if type(value) is CoroutineType:
                # A sync wrapper of an async def (a decorator's): its value is
                # the coroutine's, which the runtime awaits, as it does the
                # coroutine any sync body returns.
                return finish(value)
            return to_json(value)

        wrapper = execute_sync
    return wrapper


class _ToolExecute(functools.partial[Any]):
    """A ``@tool`` definition's ``execute``: its validating body (the one
    function :func:`_execute` made, called as it is: ``inspect`` sees
    through a ``partial``, so an ``async def``'s is still async), which
    pickles as what it was made of: the function, the tool's name as given
    and the function's resolved type hints (``_made_of``), never the
    validators (pydantic-core's validator of the arguments' model, which
    ``create_model`` made and no module holds, does not round-trip).

    The execute of a module-level definition (``fn.__module__`` then
    ``fn.__qualname__`` reach, in this process, the definition whose
    execute this is; ``__main__`` excepted, which is another module where
    it is loaded) pickles as that reference: loading imports the module
    and takes its definition's execute. Any other (a local tool, a
    definition made by calling ``tool(fn)``, a bound method's) pickles as
    ``(fn, name, hints)`` and is decorated again where it is loaded, the
    hints given (they may name what only the decorating frame saw), so a
    cloudpickled local function works too. Copies are the object itself,
    as for a function."""

    __name__: str
    __qualname__: str
    __wrapped__: _Function
    _made_of: tuple[_Function, str | None, dict[str, Any]]

    def __new__(
        cls, body: _Function, shown: str, made_of: tuple[_Function, str | None, dict[str, Any]]
    ) -> _ToolExecute:
        execute = super().__new__(cls, body)
        execute.__name__ = "execute"
        execute.__qualname__ = f"tool({shown!r}).execute"
        execute.__wrapped__ = made_of[0]
        execute._made_of = made_of
        return execute

    def __reduce__(self) -> tuple[Any, ...]:
        fn, name, hints = self._made_of
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
        if type(module) is str and type(qualname) is str and module != "__main__":
            found = _definition_at(sys.modules.get(module), qualname)
            if found is not None and found.execute is self:
                return (_module_tool_execute, (module, qualname))
        return (_rebuilt_execute, (fn, name, hints))

    def __repr__(self) -> str:
        return f"<{self.__qualname__}>"

    def __copy__(self) -> _ToolExecute:
        return self

    def __deepcopy__(self, memo: object) -> _ToolExecute:
        return self


def _definition_at(module: object, qualname: str) -> TypedToolDefinition | None:
    """The ``@tool`` definition at ``qualname`` in ``module``, or None."""
    found: object = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, TypedToolDefinition) else None


def _module_tool_execute(module: str, qualname: str) -> Any:
    """Load a module-level definition's execute (see :class:`_ToolExecute`)."""
    found = _definition_at(importlib.import_module(module), qualname)
    if found is None:
        raise InvalidTypeError(
            f"{module}.{qualname} is no @tool definition here, where a pickled @tool execute names it: install the "
            "same version of that module wherever the tool runs"
        )
    return found.execute


def _rebuilt_execute(fn: _Function, name: str | None, hints: dict[str, Any]) -> Any:
    """Load the execute of a tool that is not module-level: ``fn``
    decorated again (see :class:`_ToolExecute`)."""
    return _build(fn, _Options(name), None, hints).execute
