"""``./dev demo``: a short, real run of the runtime, printed for a person.

It registers a few tools, runs one model batch with parallel-safe and
exclusive calls, a policy denial and a guard, then a batch that is aborted
mid-way, and prints each result, the schedule it ran on and the session log.
It takes no arguments but ``--help`` (an unknown one is refused, exit 2).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from typing import Any

from typing_extensions import TypedDict  # pydantic reads a TypedDict from here before Python 3.12

from . import (
    AbortController,
    Agent,
    Deny,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolRunContext,
    ToolRuntime,
    text,
    tool,
)


class _Fetched(TypedDict):
    url: str
    bytes: int


def _tools(timeline: list[tuple[str, str, float]], lock: threading.Lock) -> list[Any]:
    def mark(call_id: str, what: str) -> None:
        with lock:
            timeline.append((call_id, what, time.perf_counter()))

    @tool(concurrency_safe=True, render=lambda args, v: [text(f"{v['url']}: {v['bytes']} bytes")])
    def fetch(url: str, ms: int, ctx: ToolRunContext) -> _Fetched:
        """Fetch a URL (simulated; takes `ms` milliseconds)."""
        mark(ctx.call_id, "start")
        # Cooperative work: waits on the call's signal instead of sleeping blindly.
        ctx.signal.wait(ms / 1000)
        mark(ctx.call_id, "end")
        return {"url": url, "bytes": 1024 * ms}

    @tool(name="write_file")
    def write(path: str, text: str, ctx: ToolRunContext) -> str:
        """Write a file (exclusive: runs alone)."""
        mark(ctx.call_id, "start")
        ctx.signal.wait(0.02)
        mark(ctx.call_id, "end")
        return f"wrote {len(text)} bytes to {path}"

    return [fetch, write]


_CONTENT_WIDTH = 60


def _row(call_id: str, name: str, result: Any) -> str:
    """One result, its content wrapped at word boundaries (never cut)."""
    status = "error" if result.is_error else "ok"
    shown = result.content[0].text if result.content else ""
    code = result.error.info.code if result.is_error and result.error.info else ""
    head = f"  {call_id:<4} {name:<11} {status:<6} {code:<24} "
    lines = textwrap.wrap(shown, _CONTENT_WIDTH, break_on_hyphens=False) or [""]
    return "\n".join([head + lines[0], *(" " * len(head) + line for line in lines[1:])])


def _rows(calls: Sequence[ToolCall], results: Sequence[Any]) -> None:
    """Print one row per result, its tool's name from the call it answers
    (the results are in model order)."""
    for call, item in zip(calls, results, strict=True):
        print(_row(item.call_id, call.name, item.result))


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m dsh_actors.demo",
        description=(
            "A two-second tour of dsh-actors (./dev demo): one batch of tool calls run on a real runtime "
            "(parallel-safe fetches, exclusive writes, a policy denial, invalid arguments, an unknown tool), "
            "then a batch aborted mid-way; it prints each result, the schedule the calls ran on and the "
            "session log. It takes no arguments."
        ),
    )


def main(argv: Sequence[str] = ()) -> None:
    """Run the tour; ``argv``, the command line's arguments, takes only
    ``--help`` (which prints what the tour does and exits 0); anything
    else exits 2 naming it (argparse's usage message)."""
    _parser().parse_args(argv)
    timeline: list[tuple[str, str, float]] = []
    lock = threading.Lock()
    with ToolRuntime(max_parallel_tool_calls=3) as rt:
        for definition in _tools(timeline, lock):
            rt.tools.register(definition)
        rt.events.on(
            "tools/pre-execute",
            lambda ex, nxt: (
                Deny("writes under /etc are not allowed")
                if ex.name == "write_file" and str(ex.arguments.get("path", "")).startswith("/etc")
                else nxt()
            ),
        )
        session = Session()
        agent = Agent("demo", session=session)
        calls = [
            ToolCall("c1", "fetch", '{"url": "https://a.example", "ms": 40}'),
            ToolCall("c2", "fetch", '{"url": "https://b.example", "ms": 10}'),
            ToolCall("c3", "fetch", '{"url": "https://c.example", "ms": 20}'),
            ToolCall("c4", "write_file", '{"path": "notes.txt", "text": "hello"}'),
            ToolCall("c5", "write_file", '{"path": "/etc/passwd", "text": "x"}'),
            ToolCall("c6", "fetch", '{"url": 5}'),
            ToolCall("c7", "nope", "{}"),
        ]
        started = time.perf_counter()
        batch = rt.tools.execute(ToolBatchInput(calls=tuple(calls), agent=agent, log=LogStep(turn=1, step=1)))
        elapsed = (time.perf_counter() - started) * 1000
        print(f"dsh-actors demo: one batch of {len(calls)} calls, cap 3, in {elapsed:.1f} ms\n")
        print(f"  {'id':<4} {'tool':<11} {'status':<6} {'code':<24} content")
        _rows(calls, batch.results)
        # One clock for the header and the schedule: both from the batch's start.
        print("\n  schedule (ms since the batch started): fetches overlap; the write runs alone")
        for call_id, what, at in sorted(timeline, key=lambda x: x[2]):
            print(f"    {(at - started) * 1000:7.1f}  {call_id} {what}")

        print("\nan aborted batch: the user presses stop while a2 is being prepared")
        controller = AbortController()
        gate = threading.Event()

        def on_result(ex: Any, result: Any) -> None:
            if ex.call_id == "a1":
                gate.set()

        dispose = rt.events.on("tools/result", on_result)
        rt.events.on(
            "tools/pre-execute",
            lambda ex, nxt: (controller.abort("user pressed stop"), nxt())[1] if ex.call_id == "a2" else nxt(),
        )
        aborted_calls = (
            ToolCall("a1", "fetch", '{"url": "https://d.example", "ms": 5}'),
            ToolCall("a2", "write_file", '{"path": "x", "text": "y"}'),
            ToolCall("a3", "fetch", '{"url": "https://e.example", "ms": 5}'),
        )
        aborted = rt.tools.execute(
            ToolBatchInput(
                calls=aborted_calls,
                agent=agent,
                signal=controller.signal,
                log=LogStep(turn=1, step=2),
            )
        )
        dispose()
        _rows(aborted_calls, aborted.results)

        print(f"\nsession log: {len(session.events())} events")
        for event in session.events():
            kind = event["type"]
            if kind == "tool/batch":
                print(f"  tool/batch  {', '.join(c['call_id'] for c in event['calls'])}")
            elif kind == "tool/call":
                print(f"  tool/call   {event['call_id']:<4} {event['name']}")
            elif kind == "tool/start":
                print(f"  tool/start  {event['call_id']}")
            else:
                print(f"  tool/result {event['call_id']:<4} {'error' if event['is_error'] else 'ok'}")


if __name__ == "__main__":
    main(sys.argv[1:])
