"""The runtime in its callers' hands: async bodies whose tasks the
application's loop cancels.

Threads are synchronised with Events only; a timeout is a deadlock guard,
never a way to wait for something to happen."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from dsh_actors import (
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
)

GUARD = 10.0
TEXT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])


def tool(name: str, body: Any) -> Any:
    return define_tool(
        name=name, description=name, parameters={}, output=TEXT, execute=body, is_concurrency_safe=lambda args: True
    )


def code(result: Any) -> str | None:
    return None if not result.is_error else result.error.info.code


def test_a_body_whose_task_the_application_cancels_fails_with_a_message_naming_it() -> None:
    """A runtime bound to the application's loop: the application cancels
    that loop's tasks (as ``asyncio.run`` does as it ends) while an async
    body runs there. The call fails with a message that names the tool and
    says what happened, not the bare ``CancelledError``."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="app-loop")
    thread.start()
    entered = threading.Event()

    async def slow(args: Any, ctx: Any) -> str:
        loop.call_soon(entered.set)
        await asyncio.Event().wait()
        return "never"

    def cancel_all() -> None:
        for task in asyncio.all_tasks(loop):
            task.cancel()

    try:
        with ToolRuntime(loop=loop) as rt:
            rt.tools.register(tool("slow", slow))
            submitted = rt.tools.submit(ToolBatchInput(calls=[ToolCall("c0", "slow", "{}")]))
            assert entered.wait(GUARD)
            loop.call_soon_threadsafe(cancel_all)
            result = submitted.result(GUARD).results[0].result
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(GUARD)
        loop.close()
    assert result.is_error and result.error.info.name == "CancelledError"
    assert result.error.message == (
        'the task running async tool "slow" was cancelled, and not by the runtime (its event loop '
        "shutting down, or the application cancelling its tasks)"
    )
