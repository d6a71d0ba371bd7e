"""The process side of the crash trials (``test_crash_trials.py``).

Run as a script, it imports dsh-actors and the trial's tools once (it
starts no thread), then reads one JSON command per line on stdin and, for
each, forks a child process that does the work, so each trial costs a fork
rather than an interpreter start:

* ``{"op": "run", "log": PATH, "effects": PATH, "kill_at": K}``: the child
  runs the trial's logged batch (step 1 of turn 1) into a new session log
  at ``log``. Each *moment* is numbered as it is reached: every event the
  session has just written (``tool/batch``, ``tool/call``, ``tool/start``,
  ``tool/result``) and every tool body that has just made its side effect
  (a line appended to ``effects``) and not returned yet. At moment ``K``
  the child writes ``{"point": K, "moment": ...}`` on stdout and blocks,
  and so does every thread of it that reaches a later moment: the parent
  kills it there with SIGKILL. A child that finishes writes ``{"done": N}``
  (N moments) and exits.
* ``{"op": "recover", "log": PATH, "effects": PATH, "kill_at": K|null}``: a
  child opens the log (``Session.open``), registers the same tools and
  calls ``rt.tools.recover(agent, 1, 1)``; it writes ``{"recovered":
  [[call_id, is_error, code, text], ...]}`` and exits (it can be killed at
  its own moments too).
* ``{"op": "reap", "pid": PID}``: wait for a child, answer ``{"reaped":
  PID, "status": STATUS}``.

Every fork is answered with ``{"pid": PID}``. Lines are written with one
``os.write`` each (shorter than the pipe's atomic size), so a child's and
the parent's lines never interleave. Nothing sleeps: the parent kills on
the child's line.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import Any

from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool

#: A guard: a child blocked at its kill point exits after this long, should
#: the parent be gone (a correct run kills it long before).
BLOCK_GUARD_S = 60.0

#: The trial's batch: (call id, tool). The tools differ in what matters to
#: recovery: idempotent or not, concurrency-safe or exclusive, sync or async.
CALLS = (
    ("c0", "lookup"),  # idempotent, parallel
    ("c1", "charge"),  # not idempotent, parallel
    ("c2", "ship"),  # not idempotent, exclusive
    ("c3", "fetch"),  # idempotent, parallel, async
    ("c4", "charge"),  # not idempotent, parallel
    ("c5", "index"),  # idempotent, exclusive
)
IDEMPOTENT = frozenset({"lookup", "fetch", "index"})
LIMIT = 3


class Moments:
    """Numbers the moments as they are reached (a lock orders them) and
    blocks at the kill point and after it."""

    def __init__(self, kill_at: int | None) -> None:
        self.kill_at = kill_at
        self.count = 0
        self.lock = threading.Lock()
        self.forever = threading.Event()  # never set

    def reached(self, moment: str) -> None:
        with self.lock:
            self.count += 1
            number = self.count
            if self.kill_at is None or number < self.kill_at:
                return
            if number == self.kill_at:
                say({"point": number, "moment": moment})
        # At the kill point, or after it: stay here until SIGKILL.
        self.forever.wait(BLOCK_GUARD_S)
        os._exit(3)


class TrialSession(Session):
    """A file-backed session that reports a moment after each event it has
    written (the real append does the writing; ``append_lossless`` goes
    through ``append`` in a subclass that overrides it)."""

    moments: Moments

    def append(self, event: Any) -> None:
        super().append(event)
        self.moments.reached(f"{event['type']} {event.get('call_id', '')}".strip())


def tools(effects: str, moments: Moments) -> list[Any]:
    """The trial's tools: each body appends its call id to ``effects`` (one
    ``write`` on an ``O_APPEND`` descriptor), then reports a moment."""

    def effect(call_id: str) -> None:
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{call_id}\n".encode())
        finally:
            os.close(fd)
        moments.reached(f"effect {call_id}")

    def body(args: Any, ctx: Any) -> str:
        effect(ctx.call_id)
        return f"{ctx.name} {ctx.call_id}"

    async def async_body(args: Any, ctx: Any) -> str:
        await asyncio.sleep(0)
        effect(ctx.call_id)
        return f"{ctx.name} {ctx.call_id}"

    output = ToolOutput(schema={"type": "string"})
    made = []
    for name, safe in (("lookup", True), ("charge", True), ("ship", False), ("fetch", True), ("index", False)):
        made.append(
            define_tool(
                name=name,
                description=f"The trial's {name} tool.",
                parameters={},
                output=output,
                execute=async_body if name == "fetch" else body,
                is_concurrency_safe=safe,
                idempotent=name in IDEMPOTENT,
            )
        )
    return made


def say(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def open_session(path: str, moments: Moments, *, new: bool) -> TrialSession:
    session = TrialSession(path) if new else TrialSession.open(path)
    session.moments = moments
    return session


def run(command: dict[str, Any]) -> None:
    moments = Moments(command["kill_at"])
    session = open_session(command["log"], moments, new=True)
    with ToolRuntime() as rt:
        for definition in tools(command["effects"], moments):
            rt.tools.register(definition)
        rt.tools.execute(
            ToolBatchInput(
                calls=tuple(ToolCall(call_id, name, "{}") for call_id, name in CALLS),
                agent=Agent("trial", session=session),
                log=LogStep(turn=1, step=1),
                max_parallel_tool_calls=LIMIT,
            )
        )
    session.close()
    say({"done": moments.count})


def recover(command: dict[str, Any]) -> None:
    moments = Moments(command["kill_at"])
    session = open_session(command["log"], moments, new=False)
    with ToolRuntime() as rt:
        for definition in tools(command["effects"], moments):
            rt.tools.register(definition)
        result = rt.tools.recover(Agent("trial", session=session), 1, 1)
    session.close()
    rows = []
    for item in result.results:
        outcome = item.result
        error = outcome.error if outcome.is_error else None
        code = None if error is None or error.info is None else error.info.code
        rows.append([item.call_id, outcome.is_error, code, outcome.content[0].text])  # type: ignore[union-attr]
    say({"recovered": rows})


def main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "reap":
            _, status = os.waitpid(command["pid"], 0)
            say({"reaped": command["pid"], "status": status})
            continue
        pid = os.fork()
        if pid == 0:
            try:
                (run if op == "run" else recover)(command)
            except BaseException as exc:  # noqa: BLE001 - the parent reads it
                say({"error": f"{type(exc).__name__}: {exc}"})
                os._exit(2)
            os._exit(0)
        say({"pid": pid})


if __name__ == "__main__":
    main()
