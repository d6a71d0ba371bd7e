"""Helpers for the PTC tests: tools, a runner, and process checks.

Nothing here sleeps to synchronise: bodies signal with Events and wait on
barriers or signals, every wait bounded by ``GUARD``. Process checks read
``/proc`` (psutil is not available): a worker's pid is also its process
group id (it runs in its own session).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from dsh_actors import (
    AbortSignal,
    Agent,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    define_tool,
    text,
)
from executors.ptc import PtcExecutor

GUARD = 10.0
"""Seconds: a deadlock guard for every wait. A correct run never reaches it."""

JSON_OUTPUT = ToolOutput(schema={"type": "json"}, render=lambda args, value: [text(orjson.dumps(value).decode())])


def safe(args: Any) -> bool:
    return True


def tool(
    name: str,
    body: Callable[[Any, Any], Any],
    *,
    parameters: Mapping[str, Any] | None = None,
    concurrent: bool = True,
    description: str | None = None,
    output: ToolOutput = JSON_OUTPUT,
) -> ToolDefinition:
    """A ``define_tool`` tool returning any JSON; concurrency-safe unless
    ``concurrent=False``."""
    return define_tool(
        name=name,
        description=description or f"test tool {name}",
        parameters={} if parameters is None else parameters,
        output=output,
        execute=body,
        is_concurrency_safe=safe if concurrent else None,
    )


def echo_tool() -> ToolDefinition:
    return tool("echo", lambda args, ctx: dict(args), parameters={"message": {"type": "string"}})


def install(rt: Any, **options: Any) -> PtcExecutor:
    """A ``PtcExecutor`` installed globally in ``rt``."""
    executor = PtcExecutor(**options)
    rt.tools.set_executor(executor)
    return executor


def batch(
    code: str,
    *,
    agent: Agent | None = None,
    signal: AbortSignal | None = None,
    call_id: str = "c1",
    log: bool = True,
) -> ToolBatchInput:
    return ToolBatchInput(
        calls=(ToolCall(id=call_id, name="run_code", arguments={"code": code}),),
        agent=agent,
        signal=signal,
        log=LogStep(turn=1, step=1) if log and agent is not None else None,
    )


def run_code(rt: Any, code: str, **kwargs: Any) -> Any:
    """Run ``code`` as one ``run_code`` call; its result."""
    return rt.tools.execute(batch(code, **kwargs)).results[0].result


def with_session() -> Agent:
    return Agent("main", session=Session())


def code_of(result: Any) -> str | None:
    if not result.is_error:
        return None
    info = result.error.info
    return None if info is None else str(info.code)


def must(event: threading.Event, what: str) -> None:
    assert event.wait(GUARD), f"timed out waiting for: {what}"


def events_of(session: Session, *kinds: str) -> list[dict[str, Any]]:
    return [e for e in session.events() if e["type"] in kinds]


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def _stat(pid: str) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def processes() -> list[tuple[int, str, int, int]]:
    """(pid, state, ppid, pgrp) of every process."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None:
                out.append((int(entry), *stat))
    return out


def children() -> list[int]:
    """Pids of this process's children (zombies included: not reaped is
    left behind)."""
    me = os.getpid()
    return sorted(pid for pid, _state, ppid, _pgrp in processes() if ppid == me)


def alive(pid: int) -> bool:
    """Whether ``pid`` exists (a zombie counts: it was not reaped)."""
    return _stat(str(pid)) is not None


def group_members(pgid: int) -> list[int]:
    return sorted(pid for pid, _state, _ppid, pgrp in processes() if pgrp == pgid)


def assert_gone(pid: int) -> None:
    """The worker ``pid`` and everything in its process group are gone."""
    assert not alive(pid), f"worker {pid} is still there"
    assert group_members(pid) == [], f"processes left in group {pid}: {group_members(pid)}"
