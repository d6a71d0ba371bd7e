"""The process side of ``test_one_writer.py``: run a logged batch (``run``:
a new log) or recover its step (``recover``: ``Session.open``) in a process
of its own.

``python writer_child.py OP LOG EFFECTS BLOCK``: the step is ``c0``
(``charge``, not idempotent) then ``c1`` (``lookup``, idempotent), one at a
time. Each body appends its call id to ``EFFECTS``; the body of the call
named ``BLOCK`` then writes ``{"running": CALL_ID}`` on stdout and waits for
a line on stdin before it returns (the parent kills the process there, or
lets it go on). At the end the process writes ``{"results": [[call_id,
text], ...]}``, or ``{"refused": message}`` when the runtime refused.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool
from dsh_actors.errors import UsageError

CALLS = (("c0", "charge"), ("c1", "lookup"))


def say(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def shop_tools(effects: str, block: str) -> list[Any]:
    def body(args: Any, ctx: Any) -> str:
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.call_id}\n".encode())
        finally:
            os.close(fd)
        if ctx.call_id == block:
            say({"running": ctx.call_id})
            sys.stdin.readline()  # the parent's go (or its end)
        return f"{ctx.name} {ctx.call_id}"

    return [
        define_tool(
            name=name,
            description=f"The {name} tool.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}),
            execute=body,
            is_concurrency_safe=True,
            idempotent=name == "lookup",
        )
        for name in ("charge", "lookup")
    ]


def main() -> None:
    op, log, effects, block = sys.argv[1:5]
    with ToolRuntime() as rt:
        for definition in shop_tools(effects, block):
            rt.tools.register(definition)
        try:
            if op == "run":
                agent = Agent("shop", session=Session(log))
                batch = ToolBatchInput(
                    calls=tuple(ToolCall(call_id, name, "{}") for call_id, name in CALLS),
                    agent=agent,
                    log=LogStep(turn=1, step=1),
                    max_parallel_tool_calls=1,
                )
                result = rt.tools.execute(batch)
            else:
                agent = Agent("shop", session=Session.open(log))
                result = rt.tools.recover(agent, 1, 1)
        except UsageError as exc:
            say({"refused": str(exc)})
            return
        assert agent.session is not None
        agent.session.close()
    say({"results": [[item.call_id, item.result.content[0].text] for item in result.results]})  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
