"""dsh-actors: the tool-call runtime of LLM agents, as an actor system.

This module is the public surface (``docs/reference.md``, section 1, plus the
error classes and card records results carry) and nothing else.

The library is silent until the application asks it to log: it logs through
loguru, disabled at import. ``logger.enable("dsh_actors")`` (and
``"policies"``, ``"executors"``; before or after the import) turns its
messages on: DEBUG lines about lifecycle, ERROR lines (with the
exception's own traceback) for contained failures such as a raising
``tools/result`` observer. The ``dsh-actors`` command enables them
(warnings and errors; ``--verbose``: everything).
"""

from loguru import logger as _logger

# Silent until the application enables it, whatever the order: the core and
# the packages installed beside it (policies and executors import the core
# first, so this runs before their code) are disabled here, once; what the
# application chose for any of them (or a module of one) before this import
# is applied again over the disable, which wipes it. (loguru keeps those
# choices in its activation list, which no public API reads; a loguru without
# one gets the disable.)
_PACKAGES = ("dsh_actors.", "policies.", "executors.")
_chosen = [c for c in getattr(getattr(_logger, "_core", None), "activation_list", ()) if c[0].startswith(_PACKAGES)]
for _package in _PACKAGES:
    _logger.disable(_package[:-1])
for _name, _enabled in sorted(_chosen, key=lambda c: c[0].count(".")):
    (_logger.enable if _enabled else _logger.disable)(_name[:-1])

from .definition import LONGEST_WAIT_MS, ToolDefinition, ToolOutput, ToolSchema, define_tool
from .errors import (
    AbortError,
    CodeRunFailedError,
    DshError,
    ErrorCode,
    ExecutorUnavailableError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    JsonSchemaError,
    LosslessJsonError,
    RegistrationError,
    RuntimeStoppedError,
    ToolArgsError,
    ToolBatchExecutionError,
    ToolFailedError,
    ToolNotFoundError,
    ToolOutputError,
    ToolPolicyError,
    ToolTimeoutError,
    UsageError,
    printable,
)
from .errors import is_fault as is_fault  # importable, not in __all__ (see below)
from .events import UNSET as UNSET  # importable, not in __all__ (see below)
from .events import Accept, Allow, Ask, Block, Cancel, Deny
from .execution import ToolExecution, ToolExecutionInput, ToolRunContext
from .executor_protocol import ToolExecutor, ToolModelInput, ToolPromptSection
from .json import MAX_JSON_DEPTH, dumps, loads, materialize, thaw
from .model import (
    Agent,
    ApprovalRequest,
    ImageBlock,
    LogStep,
    ModelSelection,
    ReasoningBlock,
    TextBlock,
    ToolActivationContext,
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolCallResult,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
    ToolProgress,
    ToolRestriction,
    UserMessage,
    text,
)
from .pipeline.results import logged_meta as logged_meta  # importable, not in __all__ (see below)
from .presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadFileLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatchLine,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    ToolCallKind,
    ToolCallView,
    ToolResultView,
    WebResultView,
    WebSource,
)
from .registry import ToolsService
from .runtime import ToolRuntime
from .scheduling import NativeExecutor
from .schema import (
    assert_object_json_schema,
    assert_supported_json_schema,
    parameter_schema_spec_to_json_schema,
    validate_args,
    validate_json_schema_value,
    value_schema_spec_to_json_schema,
)
from .session import Session
from .session import ptc_dispatch_event as ptc_dispatch_event  # importable, not in __all__ (see below)
from .session import ptc_dispatch_start_event as ptc_dispatch_start_event  # (the same)
from .signals import AbortController, AbortSignal
from .toolset import ResolvedToolSet
from .typed import tool

# Importable but not in __all__ (docs/reference.md section 1 lists __all__):
# UNSET is the default of Accept(value=UNSET), "no replacement value";
# is_fault(exc) tells a fault from an outcome (what the logging, the
# session log's tracebacks and policies.otel share); ptc_dispatch_event and
# ptc_dispatch_start_event build the session log's sub-dispatch events
# (executors.ptc writes them: one builder of their shape), logged_meta the
# presentation meta a sub-call's event carries (what its tool's
# presentation_meta gives a root call's result: one way to compute it).
__all__ = [
    # runtime and scopes
    "ToolRuntime",
    "Agent",
    "Session",
    "ModelSelection",
    "ToolActivationContext",
    "ToolRestriction",
    "ToolsService",
    "ResolvedToolSet",
    "ApprovalRequest",
    "ToolExecutor",
    "ToolModelInput",
    "ToolPromptSection",
    "NativeExecutor",
    # definitions
    "tool",
    "define_tool",
    "ToolDefinition",
    "ToolOutput",
    "ToolSchema",
    "LONGEST_WAIT_MS",
    # calls and results
    "ToolCall",
    "ToolBatchInput",
    "LogStep",
    "ToolBatchResult",
    "ToolCallResult",
    "ToolExecution",
    "ToolRunContext",
    "ToolExecutionInput",
    "ToolExecutionSuccess",
    "ToolExecutionFailure",
    "ToolFailure",
    "ToolProgress",
    "ToolErrorInfo",
    "TextBlock",
    "ImageBlock",
    "ReasoningBlock",
    "UserMessage",
    "text",
    # decisions
    "Allow",
    "Deny",
    "Cancel",
    "Ask",
    "Accept",
    "Block",
    # cancellation
    "AbortController",
    "AbortSignal",
    # errors
    "DshError",
    "ToolArgsError",
    "ToolOutputError",
    "ToolNotFoundError",
    "JsonSchemaError",
    "ToolBatchExecutionError",
    "AbortError",
    "ToolTimeoutError",
    "RegistrationError",
    "CodeRunFailedError",
    "ErrorCode",
    # lossless JSON
    "materialize",
    "thaw",
    "dumps",
    "loads",
    "MAX_JSON_DEPTH",
    # schema
    "assert_supported_json_schema",
    "validate_json_schema_value",
    "assert_object_json_schema",
    "value_schema_spec_to_json_schema",
    "parameter_schema_spec_to_json_schema",
    "validate_args",
    # presentation
    "ToolCallView",
    "ToolResultView",
    "GenericCallView",
    "TerminalCallView",
    "DiffCallView",
    "GenericResultView",
    "TerminalResultView",
    "DiffResultView",
    "SearchResultView",
    "ReadResultView",
    "WebResultView",
    "ToolCallKind",
    "FileLocation",
    "FileDiff",
    "ReadFileLine",
    # Beyond the names the contract first pinned: every error class the runtime raises or records
    # in results, and the records search and web cards are made of.
    "ToolPolicyError",
    "UsageError",
    "InvalidValueError",
    "InvalidTypeError",
    "InvalidStateError",
    "RuntimeStoppedError",
    "ToolFailedError",
    "ExecutorUnavailableError",
    "LosslessJsonError",
    "SearchFileMatches",
    "SearchMatchLine",
    "WebSource",
    # Text a model or a tool wrote, made safe to show on a terminal (the CLI, the approval prompt).
    "printable",
]
