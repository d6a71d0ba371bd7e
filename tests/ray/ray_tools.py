"""Tool bodies and a synchronisation actor for the Ray tests.

The workers import this module by name (the cluster's workers get this
folder on their PYTHONPATH, see conftest.py), so everything a test ships
to Ray lives here. This folder has no ``__init__.py`` on purpose: a
package named ``ray`` would shadow Ray itself.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import defaultdict
from typing import Any

import ray
from pydantic import BaseModel, Field

from dsh_actors import (
    AbortError,
    ErrorCode,
    ToolFailedError,
    ToolOutput,
    ToolRunContext,
    UserMessage,
    define_tool,
    text,
)
from dsh_actors import tool as typed_tool

NAMESPACE = "dsh-tests"
GATE = "gate"

SPIN_FOREVER = 120.0  # longer than any test; an abort must end it


@ray.remote(num_cpus=0)
class Gate:
    """Events, values and an enter/leave log, for bodies and the test to
    meet at without sleeping (an async actor: waits do not block it)."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.values: dict[str, Any] = {}
        self.active: set[str] = set()
        self.journal: list[tuple[str, str, tuple[str, ...]]] = []

    def set(self, name: str, value: Any = None) -> None:
        self.values[name] = value
        self.events[name].set()

    async def wait(self, name: str, timeout: float = 30.0) -> Any:
        await asyncio.wait_for(self.events[name].wait(), timeout)
        return self.values.get(name)

    async def wait_any(self, names: list[str], timeout: float = 30.0) -> str:
        """The first of ``names`` to be set (Ray does not promise which of
        two equal queued tasks it starts first)."""
        waits = {asyncio.ensure_future(self.events[n].wait()): n for n in names}
        done, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if not done:
            raise TimeoutError(f"none of {names} was set")
        return waits[next(iter(done))]

    def is_set(self, name: str) -> bool:
        return self.events[name].is_set()

    def enter(self, name: str) -> None:
        self.journal.append(("enter", name, tuple(sorted(self.active))))
        self.active.add(name)
        self.set(f"entered:{name}")

    def leave(self, name: str) -> None:
        self.active.discard(name)
        self.journal.append(("leave", name, tuple(sorted(self.active))))

    def log(self) -> list[tuple[str, str, tuple[str, ...]]]:
        return list(self.journal)

    def reset(self) -> None:
        self.events.clear()
        self.values.clear()
        self.active.clear()
        self.journal.clear()


@ray.remote(num_cpus=2)
def warm() -> int:
    """Takes the whole (2-CPU) cluster for a moment: it runs only once
    nothing else holds a CPU."""
    return os.getpid()


@ray.remote(num_cpus=1)
def warm_one() -> int:
    return os.getpid()


def call(ref: Any, timeout: float = SPIN_FOREVER) -> Any:
    """A body's wait for an actor call: through the ref's future, not
    ``ray.get`` (a task blocked in ray.get lends its CPUs to other tasks,
    and a queued test task would start)."""
    return ref.future().result(timeout)


def gate() -> Any:
    return ray.get_actor(GATE, namespace=NAMESPACE)


# --------------------------------------------------------------------------
# Bodies (they run on Ray workers)
# --------------------------------------------------------------------------


def identify(args: Any, ctx: Any) -> Any:
    """Who ran it, and the context it saw."""
    return {
        "pid": os.getpid(),
        "x": args.get("x"),
        "call_id": ctx.call_id,
        "root_call_id": getattr(ctx, "root_call_id", None),
        "name": ctx.name,
        "agent_id": getattr(ctx, "agent_id", None),
        "agent_path": getattr(ctx, "agent_path", None),
        "arguments": args,
    }


def chained(args: Any, ctx: Any) -> Any:
    """Waits until the call named ``after`` (if any) has finished, then
    says it finished: later calls finish first."""
    g = gate()
    after = args.get("after")
    if after:
        call(g.wait.remote(f"done:{after}"))
    call(g.set.remote(f"done:{args['x']}"))
    return args["x"]


def held(args: Any, ctx: Any) -> Any:
    """Enters, waits until the test releases it, leaves."""
    g = gate()
    name = args["x"]
    call(g.enter.remote(name))
    try:
        call(g.wait.remote(f"release:{name}"))
    finally:
        call(g.leave.remote(name))
    return name


def cooperative(args: Any, ctx: Any) -> Any:
    """Says it started, waits on its signal, cleans up and gives up."""
    g = gate()
    call(g.set.remote(f"started:{args['x']}", os.getpid()))
    if not ctx.signal.wait(SPIN_FOREVER):
        return "never aborted"
    ctx.defer_context(UserMessage([text(f"cleaned up after: {ctx.signal.reason}")], source="ray-test"))
    call(g.set.remote(f"saw-abort:{args['x']}", ctx.signal.reason))
    raise AbortError(reason=ctx.signal.reason)


def ignoring(args: Any, ctx: Any) -> Any:
    """Says it started, then spins in pure Python, never looking at its
    signal: only ray.cancel's interrupt ends it."""
    g = gate()
    call(g.set.remote(f"started:{args['x']}", os.getpid()))
    deadline = time.monotonic() + SPIN_FOREVER
    n = 0
    while time.monotonic() < deadline:
        n += 1
    return "spun out"


def stubborn(args: Any, ctx: Any) -> Any:
    """Swallows ray.cancel's interrupt too: only a force cancel ends it."""
    g = gate()
    call(g.set.remote(f"started:{args['x']}", os.getpid()))
    deadline = time.monotonic() + SPIN_FOREVER
    while time.monotonic() < deadline:
        try:
            while time.monotonic() < deadline:
                pass
        except KeyboardInterrupt:
            call(g.set.remote(f"interrupted:{args['x']}"))
    return "outlasted"


async def awaits_its_abort(args: Any, ctx: Any) -> Any:
    """An ``async def`` body that awaits (never looking at its signal):
    only the cancellation of its task ends it; it cleans up, deferring a
    context, and lets the cancellation go on."""
    g = gate()
    await g.set.remote(f"started:{args['x']}", os.getpid())
    try:
        await asyncio.sleep(SPIN_FOREVER)
    except asyncio.CancelledError:
        ctx.defer_context(f"cancelled: {ctx.signal.reason}")
        await g.set.remote(f"cancelled:{args['x']}", ctx.signal.reason)
        raise
    return "slept"


def exits_its_worker(args: Any, ctx: Any) -> Any:
    os._exit(1)


def waits_to_be_killed(args: Any, ctx: Any) -> Any:
    g = gate()
    call(g.set.remote(f"started:{args['x']}", os.getpid()))
    call(g.wait.remote("never", SPIN_FOREVER))
    return "not killed"


def raises(args: Any, ctx: Any) -> Any:
    ctx.defer_context(UserMessage([text("before the error")]))
    raise ValueError(f"bad input {args.get('x')}")


class RefusedByTheService(ToolFailedError):
    """A DshError holding what does not pickle (a client, a lock)."""

    code = ErrorCode.INVALID_ARGS

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.client = threading.Lock()


def raises_what_does_not_pickle(args: Any, ctx: Any) -> Any:
    raise RefusedByTheService("the service refused: x is taken")


def returns_a_set(args: Any, ctx: Any) -> Any:
    return {"s": {1, 2}}


def concludes(args: Any, ctx: Any) -> Any:
    ctx.defer_context(UserMessage([text("see the attached")], source="grader", meta={"score": 7}))
    ctx.conclude_turn()
    return {"done": True}


def defers_text(args: Any, ctx: Any) -> Any:
    ctx.defer_context("remember the plain text")  # the driver makes the UserMessage
    ctx.defer_context(UserMessage([text("and a message")], source="ray-test"))
    return "deferred"


def bad_context(args: Any, ctx: Any) -> Any:
    ctx.defer_context(UserMessage([text("x")], meta={"s": {1, 2}}))
    return "fine"


async def async_body(args: Any, ctx: Any) -> Any:
    await asyncio.sleep(0)
    return {"async": True, "pid": os.getpid()}


def deadline_aware(args: Any, ctx: Any) -> Any:
    g = gate()
    call(g.set.remote(f"started:{args['x']}"))
    if ctx.signal.wait(SPIN_FOREVER):
        call(g.set.remote(f"saw-abort:{args['x']}", ctx.signal.reason))
        ctx.signal.throw_if_aborted()
    return "finished"


def burn(args: Any, ctx: Any) -> Any:
    """Pure-Python CPU work (``n`` loop iterations)."""
    total = 0
    for i in range(args["n"]):
        total += i * i % 7
    return total


def noop(args: Any, ctx: Any) -> Any:
    return None


class Patient:
    """A warm actor for deadline tests: no worker start inside the budget."""

    def ping(self, args: Any, ctx: Any) -> Any:
        return os.getpid()

    def wait_for_abort(self, args: Any, ctx: Any) -> Any:
        return deadline_aware(args, ctx)

    def cooperate(self, args: Any, ctx: Any) -> Any:
        return cooperative(args, ctx)


class Counter:
    """A stateful tool: its instance lives on a Ray actor."""

    def __init__(self, start: int = 0) -> None:
        self.total = start
        self.calls: list[str] = []

    def add(self, args: Any, ctx: Any) -> Any:
        self.total += args["x"]
        self.calls.append(ctx.call_id)
        return {"total": self.total, "pid": os.getpid(), "calls": list(self.calls)}

    def total_now(self, args: Any, ctx: Any) -> Any:
        return self.total


# --------------------------------------------------------------------------
# @tool definitions (their execute pickles as what it was made of)
# --------------------------------------------------------------------------


class Submission(BaseModel):
    answer: str
    points: int = Field(ge=0)


class Grade(BaseModel):
    pid: int
    call_id: str
    score: int


@typed_tool(meta={"ray": True})
def grade(submission: Submission, ctx: ToolRunContext) -> Grade:
    """Grade a submission (module-level: shipped as a reference to this
    definition, which the worker imports)."""
    if submission.answer == "boom":
        raise ValueError(f"cannot grade {submission.answer!r}")
    return Grade(pid=os.getpid(), call_id=ctx.call_id, score=submission.points * 2)


def make_scaler(factor: int) -> Any:
    """A local @tool (shipped by value: decorated again on the worker)."""

    @typed_tool(meta={"ray": True})
    async def scale(n: int) -> dict[str, int]:
        """Scale a number."""
        return {"pid": os.getpid(), "scaled": n * factor}

    return scale


# --------------------------------------------------------------------------
# Definitions (built in the driver)
# --------------------------------------------------------------------------


def tool(
    name: str,
    execute: Any,
    *,
    meta: Any = None,
    safe: Any = True,
    timeout_ms: float | None = None,
) -> Any:
    """A tool taking ``{"x": any, "after": any}``; ``safe``: True, False, or
    a classifier."""
    classifier = safe if callable(safe) else (lambda args, _s=safe: _s)
    return define_tool(
        name=name,
        description=f"test tool {name}",
        parameters={"x": {"type": "json"}, "after": {"type": "json"}, "n": {"type": "integer"}},
        output=ToolOutput(schema={"type": "json"}, render=lambda args, value: [text(repr(value))]),
        execute=execute,
        is_concurrency_safe=classifier,
        timeout_ms=timeout_ms,
        meta=meta,
    )
