"""``PtcExecutor``: programmatic tool calling through ``run_code``.

The model sees one tool, ``run_code(code)``; every other tool is an
``async`` function of ``tools`` inside the program. It is a
:class:`~dsh_actors.NativeExecutor` (batches, barriers, the log of root
calls) with two extension points filled in: ``executor_tools()`` provides
``run_code`` (run through the full pipeline like any tool), and
``direct_call_hint()`` fails a model-direct call of a native tool as
``UNKNOWN_TOOL`` with a hint that routes the model to ``run_code``, before
any policy.

A ``run_code`` call runs its program in a worker process (see
:mod:`.workers`, :mod:`.worker`), started ahead and used once; each tool
call of the program goes through the whole pipeline as a call of the
run's sub-batch (``open_sub_batch``: the runtime's one batch scheduler, see
:mod:`.run`). ``run_code`` calls are exclusive: two programs of one batch
never run at once, so an exclusive sub-call never overlaps anything.

Threads: the ``run_code`` body runs inline on its batch's executor actor
(an exclusive call is the only one that can start), and drives its run
there; sub-calls are prepared and committed on the executor actors and
dispatched on the runtime's call actors, like any batch's calls
(``tools/ptc-dispatch-log`` listeners run on the executor actor that
commits the sub-call). ``bind`` (``set_executor``) starts the spare
workers and subscribes ``tools/approval-request`` and ``tools/approval``
observers, through which a run's deadline stands still while one of its
sub-calls waits for the approval service; ``close()``
(also run first thing by ``rt.stop()``) removes them, kills every worker
and waits for the runs to end.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from loguru import logger

from dsh_actors import (
    LONGEST_WAIT_MS,
    CodeRunFailedError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    NativeExecutor,
    ToolDefinition,
    ToolExecution,
    ToolModelInput,
    ToolOutput,
    ToolPromptSection,
    ToolRunContext,
    define_tool,
    dumps,
    materialize,
    text,
    thaw,
)

from . import signatures
from .run import Run, RunSettings, cpu_seconds
from .workers import WorkerPool, default_command, remove_stale_folders

if TYPE_CHECKING:  # pragma: no cover
    from dsh_actors import ToolRuntime

__all__ = ["PtcExecutor", "RUN_CODE_PARAMETERS"]

RUN_CODE: Final = "run_code"

RUN_CODE_PARAMETERS: Final = {
    "type": "object",
    "properties": {"code": {"type": "string"}},
    "required": ["code"],
}
"""The model-facing parameters of ``run_code``."""

_RUN_CODE_OUTPUT: Final = {
    "type": "object",
    "additional_properties": False,
    "properties": {
        "result": {"type": "json", "required": True},
        "output": {"type": "string", "required": True},
    },
}

_CLOSE_WAIT_SECONDS: Final = 10.0
"""How long a direct :meth:`PtcExecutor.close` waits for the running
programs' workers to be killed and reaped (``rt.stop()`` waits until its
own deadline instead)."""
_BINDINGS_CACHED: Final = 64


def _guide(timeout_ms: float, limit: int, memory_mb: int, max_output: int, folder_mb: int) -> str:
    seconds = timeout_ms / 1000
    shown = int(seconds) if float(seconds).is_integer() else seconds
    return (
        "Call tools by writing a Python program and running it with run_code; tools cannot be "
        "called directly. Each tool is an async function of `tools`.\n"
        "- The code is the body of an `async def`: use top-level `await` and `return`.\n"
        "- Call a tool with `await tools.NAME(arg=value, ...)`; positional arguments follow the "
        "signature, and one positional dict is taken as the whole arguments object.\n"
        "- Run independent calls concurrently with `asyncio.gather(...)` (at most "
        f"{limit} at once; a call that is not safe to overlap runs alone, in order).\n"
        "- A failed call raises `ToolError` (`str(err)` is the reason, `err.code` the error code "
        "or None (a call that a policy or the approval refused or deferred), "
        "`err.error_name` the error's class name such as `FileNotFoundError`); "
        "catch it to recover, or let it fail the run.\n"
        "- `print()` output is captured; `report_progress(progress, total=None, message=None)` shows the user "
        "how far a long program is. The run's value is "
        '{"result": <the value you return, as JSON>, "output": <the printed text>}.\n'
        f"- Limits: {shown} s, {memory_mb} MB of memory, {max_output} bytes of output and result. "
        "No network and no subprocesses; write files only in the current folder (a fresh "
        f"temporary folder for each run, at most {folder_mb} MB).\n"
        "- If a run fails, its error lists the tool calls that had already run: check it before "
        "running them again."
    )


def _render(args: Any, value: Any) -> list[Any]:
    result = dumps(value["result"]).decode()
    output = value["output"]
    if output:
        return [text(f"result: {result}\noutput:\n{output}")]
    return [text(f"result: {result}")]


def _positive_int(value: object, what: str) -> int:
    if type(value) is not int or value < 1:
        raise InvalidValueError(f"{what} must be a positive integer, got {value!r}")
    return value


def _default_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}


class PtcExecutor(NativeExecutor):
    """Programmatic tool calling (see ``docs/reference.md``, "PTC").

    ``timeout_ms`` bounds a run's wall-clock time (and, with a second to
    spare, its CPU time), but for the time a tool call of the program
    waits for the approval service: a person deciding does not count, as
    for a tool's own ``timeout_ms``; ``max_parallel_sub_calls`` how many of a
    program's tool calls dispatch at once; ``memory_limit_mb`` the worker's
    address space; ``max_output_bytes`` the program's output (its printed
    text, plus whatever it writes to file descriptor 2) plus its returned
    value. A run past a limit, or whose batch is aborted, is killed and
    fails ``CODE_RUN_FAILED`` (``code run failed (<kind>): ...``).

    Keyword-only: ``max_parallel_tool_calls`` (the batch limit, as for
    ``NativeExecutor``); ``max_folder_mb`` (default 256), the most a run's
    working folder may hold: no file may grow past it (``RLIMIT_FSIZE``: the
    write fails with ``OSError: File too large``), and the folder is
    measured every 0.1 s while the program runs and once more when it
    returns: past ``max_folder_mb`` in total, or 10,000 files and folders,
    the run is killed and fails ``CODE_RUN_FAILED`` (``disk``) (between two
    measurements a program can write more than the limit: a hard quota
    needs a sandbox, e.g. a size-limited tmpfs); ``worker_command``, the
    argv that starts a worker (default ``[sys.executable, "-I", <path of
    worker.py>]``; ``{python}``, ``{worker}`` and ``{workdir}`` in an
    element are replaced, so it can be ``bwrap ...`` or ``docker run -i
    ...``; it runs in the run's working folder, in its own session);
    ``worker_env``, the worker's whole environment (default: ``PATH``,
    ``LANG``, ``PYTHONIOENCODING``), plus ``TMPDIR`` and ``HOME`` set to
    the working folder unless given; ``spare_workers``, how many workers
    are kept started ahead (at least 1).

    What a program is kept from (by the worker's audit hook and resource
    limits: defence in depth against mistakes, not a boundary for hostile
    code, see ``executors/ptc/README.md``): this process's environment
    variables (the worker does not inherit them, and reading another
    process's ``/proc/<pid>`` entries, this process's ``environ``,
    ``mem``, ``cmdline`` and open files among them, is refused); this
    process's memory and objects (a separate process); writing outside
    its working folder; the network, subprocesses and signals to other
    processes. What it is not kept from: reading any file this user can
    read (configuration files and keys on disk included), the names and
    metadata of files anywhere, the list of running processes, and
    anything a program that works around CPython's audit hooks can do.
    A worker dies with this process (``PR_SET_PDEATHSIG`` on Linux, and a
    pipe it watches); working folders a killed process left behind are
    removed when the next ``PtcExecutor`` is bound.
    """

    def __init__(
        self,
        timeout_ms: float = 30000,
        max_parallel_sub_calls: int = 10,
        memory_limit_mb: int = 512,
        max_output_bytes: int = 65536,
        *,
        max_parallel_tool_calls: int = 10,
        max_folder_mb: int = 256,
        worker_command: Sequence[str] | None = None,
        worker_env: Mapping[str, str] | None = None,
        spare_workers: int = 1,
    ) -> None:
        super().__init__(max_parallel_tool_calls)
        if type(timeout_ms) not in (int, float) or not math.isfinite(timeout_ms) or timeout_ms <= 0:
            raise InvalidValueError(f"timeout_ms must be a positive finite number, got {timeout_ms!r}")
        if timeout_ms > LONGEST_WAIT_MS:
            raise InvalidValueError(
                f"timeout_ms must be at most {LONGEST_WAIT_MS:g} (about 11.6 days), got {timeout_ms:g}"
            )
        self.timeout_ms = timeout_ms
        self.max_parallel_sub_calls = _positive_int(max_parallel_sub_calls, "max_parallel_sub_calls")
        self.memory_limit_mb = _positive_int(memory_limit_mb, "memory_limit_mb")
        self.max_output_bytes = _positive_int(max_output_bytes, "max_output_bytes")
        self.max_folder_mb = _positive_int(max_folder_mb, "max_folder_mb")
        self.max_message_bytes = max(8 << 20, 4 * self.max_output_bytes)
        spares = _positive_int(spare_workers, "spare_workers")
        if isinstance(worker_command, (str, bytes)):
            raise InvalidTypeError(
                "worker_command is the worker's argv, a sequence of str such as ['python3', '-I'], "
                f"not one {type(worker_command).__name__}"
            )
        command = default_command() if worker_command is None else list(worker_command)
        if not command or not all(type(part) is str for part in command):
            raise InvalidValueError("worker_command must be a non-empty sequence of str")
        if worker_env is not None and not isinstance(worker_env, Mapping):
            raise InvalidTypeError(f"worker_env must be a mapping of str to str, not {type(worker_env).__qualname__}")
        env = _default_env() if worker_env is None else dict(worker_env)
        if not all(type(k) is str and type(v) is str for k, v in env.items()):
            raise InvalidValueError("worker_env must map str to str")
        self.worker_command = tuple(command)
        self.workers = WorkerPool(command, env, spares)
        guide = _guide(
            timeout_ms, self.max_parallel_sub_calls, self.memory_limit_mb, self.max_output_bytes, self.max_folder_mb
        )
        self._guide = guide
        self.sections = (ToolPromptSection(title="Programmatic tool calling (run_code)", content=guide),)
        self._run_code = define_tool(
            name=RUN_CODE,
            description=guide,
            parameters={"code": {"type": "string", "required": True}},
            output=ToolOutput(schema=_RUN_CODE_OUTPUT, render=_render),
            execute=self._execute_run_code,
        )
        self._runtime: ToolRuntime | None = None
        self._ptc_lock = threading.Lock()
        # By the run_code call's token (its sub-calls' parent): written under
        # the lock, read without it by the approval listeners (one dict get).
        self._runs: dict[Any, Run] = {}
        self._ptc_closed = False
        # (rt.on_stop's disposer and the approval listeners' ones, once bound)
        self._stop_hooks: tuple[Callable[[], object], ...] = ()
        self._bindings_cache: dict[tuple[int, ...], tuple[tuple[Any, ...], Any, Any]] = {}

    def __repr__(self) -> str:
        return (
            f"<PtcExecutor timeout_ms={self.timeout_ms} max_parallel_sub_calls={self.max_parallel_sub_calls} "
            f"memory_limit_mb={self.memory_limit_mb} max_output_bytes={self.max_output_bytes} "
            f"max_folder_mb={self.max_folder_mb}>"
        )

    # -- the extension points of NativeExecutor ----------------------------

    def executor_tools(self) -> Sequence[ToolDefinition]:
        return (self._run_code,)

    def direct_call_hint(self, name: str) -> str | None:
        py = signatures.py_name(name, set(), prefix="tool")
        return (
            "Tools are called from Python here: run a program with run_code, "
            f"e.g. run_code(code='return await tools.{py}(...)')"
        )

    # -- the executor protocol ---------------------------------------------

    def describe(self, tools: Sequence[ToolDefinition]) -> ToolModelInput:
        """Only ``run_code``, its description listing the callable tools
        (``tools`` minus ``run_code``) as Python signatures."""
        found = signatures.bindings(tools)
        description = self._guide
        if found:
            description += (
                "\n\nThe tools (call them as `await tools.NAME(...)`):\n```python\n"
                + signatures.render_signatures(found)
                + "\n```"
            )
        else:
            description += "\n\nNo tools are available to programs right now."
        schema = {"name": RUN_CODE, "description": description, "parameters": thaw(RUN_CODE_PARAMETERS)}
        return ToolModelInput(schemas=(schema,), known_names=(RUN_CODE,), sections=self.prompt_sections(tools))

    def prompt_sections(self, tools: Sequence[ToolDefinition]) -> tuple[ToolPromptSection, ...]:
        """The guide and the signatures of ``tools``, as prompt sections."""
        found = signatures.bindings(tools)
        listing = signatures.render_signatures(found) if found else "# no tools are available"
        return (
            *self.sections,
            ToolPromptSection(title="Tools callable from run_code", content=f"```python\n{listing}\n```"),
        )

    def bind(self, runtime: ToolRuntime) -> None:
        """Attach to ``runtime`` (``set_executor`` calls it) and start the
        spare workers; ``rt.stop()`` then runs :meth:`close` first."""
        with self._ptc_lock:
            if self._runtime is runtime:
                return
            if self._ptc_closed:
                raise InvalidStateError("this PtcExecutor is closed")
        super().bind(runtime)
        # (Held until close(), which takes them back: a closed executor an
        # application drops is freed, not kept by the hook and the
        # listeners until rt.stop().)
        events = runtime.events
        hooks = (
            runtime.on_stop(lambda: self.close(timeout=runtime.teardown_remaining())),
            events.on("tools/approval-request", self._approval_asked),
            events.on("tools/approval", self._approval_answered),
        )
        with self._ptc_lock:
            self._runtime = runtime
            closed = self.closed  # (read again, under the lock: close() may have run meanwhile)
            if not closed:
                self._stop_hooks = hooks
        if closed:  # (closed meanwhile: the hooks it took back were not these yet)
            for hook in hooks:
                hook()
            return
        remove_stale_folders()
        self.workers.fill()

    def close(self, timeout: float = _CLOSE_WAIT_SECONDS) -> None:
        """Kill every worker (spare or running: a running program fails
        ``CODE_RUN_FAILED`` aborted) and wait, at most ``timeout`` seconds
        (``rt.stop()``: until its own deadline), for each run to have ended:
        its worker killed and reaped. It does not wait for the tool calls a
        program had made: their run answers once they have settled, which
        ``rt.stop()`` ensures by its deadline. Idempotent."""
        with self._ptc_lock:
            if self._ptc_closed:
                return
            self._ptc_closed = True
            runs = list(self._runs.values())
            hooks, self._stop_hooks = self._stop_hooks, ()
        for hook in hooks:
            hook()
        for run in runs:
            run.request_stop("aborted", "the PTC executor is shutting down; the program was killed")
        self.workers.close()
        deadline = time.monotonic() + timeout
        left = [run for run in runs if not run.wait_ended(max(0.0, deadline - time.monotonic()))]
        if left:
            logger.warning(
                "PTC runs whose worker was not reaped within {:.1f} s (their thread is busy, e.g. in a "
                "tools/progress listener; each kills its worker when it is back): {}",
                timeout,
                left,
            )

    @property
    def closed(self) -> bool:
        return self._ptc_closed

    def worker_pids(self) -> list[int]:
        """Pids of the worker processes alive now (spares and running)."""
        return self.workers.pids()

    def limits(self) -> dict[str, Any]:
        """The resource limits a worker applies (the ``run`` message's)."""
        return {
            "memory_bytes": self.memory_limit_mb << 20,
            "cpu_seconds": cpu_seconds(self.timeout_ms),
            "file_bytes": self.max_folder_mb << 20,
        }

    def _run_settings(self) -> RunSettings:
        return RunSettings(
            timeout_ms=self.timeout_ms,
            max_parallel_sub_calls=self.max_parallel_sub_calls,
            max_output_bytes=self.max_output_bytes,
            max_message_bytes=self.max_message_bytes,
            max_folder_mb=self.max_folder_mb,
            memory_limit_mb=self.memory_limit_mb,
            limits=self.limits(),
            own_tools=tuple(d.name for d in self.executor_tools()),
            open_sub_batch=self.open_sub_batch,
            discard=self.workers.discard,
        )

    # -- run_code ------------------------------------------------------------

    def _execute_run_code(self, args: Any, ctx: ToolRunContext) -> dict[str, Any]:
        """The body of ``run_code`` (its batch's executor actor, or a call actor)."""
        rt = self._runtime
        if rt is None or self._ptc_closed:
            raise CodeRunFailedError("unavailable", "the PTC executor is closed or not installed")
        if ctx.signal.aborted:
            raise CodeRunFailedError("aborted", "the tool batch was aborted before the program started")
        found, schemas = self._bindings(rt, ctx)
        try:
            worker = self.workers.acquire()
        except RuntimeError:
            raise CodeRunFailedError("unavailable", "the PTC executor is closed") from None
        except OSError as exc:
            raise CodeRunFailedError("crashed", f"the worker process could not be started: {exc}") from exc
        try:
            run = Run(self._run_settings(), rt, ctx, worker, args["code"], found, schemas)
        except BaseException:
            self.workers.discard(worker)
            self._refill()
            raise
        with self._ptc_lock:
            closed = self.closed  # again: close() may have run meanwhile
            if not closed:
                self._runs[ctx.token] = run
        if closed:
            run.request_stop("aborted", "the PTC executor is shutting down; the program was killed")
        try:
            return run.execute()
        finally:
            with self._ptc_lock:
                self._runs.pop(ctx.token, None)
            self._refill()

    # -- approvals of sub-calls: the time a person takes does not count ------

    def _approval_asked(self, execution: ToolExecution, ask: Any) -> None:
        """``tools/approval-request``: a sub-call of a run is routed to the
        approval service now (the pipeline publishes it for an ``Ask`` that
        no earlier approval stands for, whatever listener made it); its
        run's deadline stands still until it is answered
        (:meth:`_approval_answered`) or settles (no one to ask: denied at
        once; the service raised)."""
        parent = execution.parent
        if parent is not None:
            run = self._runs.get(parent)
            if run is not None:
                run.approval_asked(execution.call_id)

    def _approval_answered(self, execution: ToolExecution, ask: Any, answer: str) -> None:
        """``tools/approval``: the service answered (published before the
        answer takes effect): the sub-call no longer waits for a person."""
        parent = execution.parent
        if parent is not None:
            run = self._runs.get(parent)
            if run is not None:
                run.approval_answered(execution.call_id)

    def _refill(self) -> None:
        """Replace the spare a run used, in the background, once the run is
        over: a booting interpreter does not compete with the run for CPU,
        and boots while the model thinks about the result. (Back-to-back
        runs want ``spare_workers=2``.)"""
        self.workers.fill_later()

    def _bindings(self, rt: ToolRuntime, ctx: ToolRunContext) -> tuple[Any, dict[str, Any]]:
        """The tools this call's program may call (as the calling scope and
        step see them now) and their binding-time schemas, frozen."""
        agent, tool_set = ctx.agent, ctx.tool_set
        tools = rt.tools
        definitions = tuple(
            d
            for d in tools.definitions(agent, tool_set)
            if d.name != RUN_CODE and tools.executable(d.name, agent, tool_set) is d
        )
        key = tuple(id(d) for d in definitions)
        with self._ptc_lock:
            cached = self._bindings_cache.get(key)
        if cached is not None and all(a is b for a, b in zip(cached[0], definitions, strict=True)):
            return cached[1], cached[2]
        found = signatures.bindings(definitions)
        schemas = {
            d.name: materialize({"name": d.name, "description": d.description, "parameters": d.parameters})
            for d in definitions
        }
        with self._ptc_lock:
            if len(self._bindings_cache) >= _BINDINGS_CACHED:
                self._bindings_cache.clear()
            self._bindings_cache[key] = (definitions, found, schemas)
        return found, schemas
