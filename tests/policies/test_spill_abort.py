"""policies.spill: a spill file whose preview never reaches the model (the
cancellation replaces the outcome, or a later hook drops the preview) is
removed; the one the model is shown stays."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from policy_helpers import WAIT, call, code_of, render_text, run_one, tool

import policies
from dsh_actors import AbortController, Accept, Agent, TextBlock, ToolOutput, define_tool, text

CAP = 1024
MAIN = Agent("main")
LONG = "HEAD-" + "x" * 10_000 + "-TAIL"


def spilled_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def use_spill(rt: Any, directory: Path) -> Any:
    return rt.use(policies.spill, directory=directory, max_inline_bytes=CAP)


def abort_once_started(started: threading.Event, controller: AbortController) -> threading.Thread:
    def abort() -> None:
        if started.wait(WAIT):
            controller.abort()

    thread = threading.Thread(target=abort)
    thread.start()
    return thread


def stubborn_body(kind: str, started: threading.Event) -> Any:
    """A body that returns LONG only after the abort (its success settles
    after it: the cancellation replaces it), sync or async."""

    def sync_body(args: Any, ctx: Any) -> str:
        started.set()
        assert ctx.signal.wait(WAIT)
        return LONG

    async def async_body(args: Any, ctx: Any) -> str:
        started.set()
        try:
            await asyncio.Event().wait()  # until the abort cancels it
        except asyncio.CancelledError:
            pass
        return LONG

    return sync_body if kind == "sync" else async_body


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_file_of_a_success_that_settled_after_the_abort_is_removed(kind: str, rt: Any, tmp_path: Path) -> None:
    spill_dir = tmp_path / "spill"
    use_spill(rt, spill_dir)
    started = threading.Event()
    controller = AbortController()
    rt.tools.register(tool("cat", stubborn_body(kind, started)))
    aborter = abort_once_started(started, controller)
    result = run_one(rt, call("cat"), agent=MAIN, signal=controller.signal)
    aborter.join(WAIT)

    assert code_of(result) == "ABORTED"
    assert spilled_files(spill_dir) == []


def test_the_file_of_a_preview_that_finalize_content_drops_is_removed(rt: Any, tmp_path: Path) -> None:
    spill_dir = tmp_path / "spill"
    use_spill(rt, spill_dir)
    rt.tools.register(
        define_tool(
            name="cat",
            description="The cat tool.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=render_text),
            execute=lambda args, ctx: LONG,
            finalize_content=lambda execution, result: [text("(output withheld)")],
        )
    )

    result = run_one(rt, call("cat"), agent=MAIN)

    assert not result.is_error and result.content == (text("(output withheld)"),)
    assert spilled_files(spill_dir) == []


def test_only_the_file_the_model_is_shown_stays_when_an_outer_listener_runs_the_chain_twice(
    rt: Any, tmp_path: Path
) -> None:
    spill_dir = tmp_path / "spill"
    use_spill(rt, spill_dir)

    def twice(execution: Any, result: Any, next_: Any) -> Any:
        next_()  # (a first spill, then thrown away)
        return next_()

    rt.events.on("tools/post-execute", twice, prepend=True)  # outer to the spill listener
    rt.tools.register(tool("cat", lambda args, ctx: LONG))

    result = run_one(rt, call("cat"), agent=MAIN)

    (kept,) = spilled_files(spill_dir)
    (block,) = result.content
    assert type(block) is TextBlock and str(kept) in block.text
    assert kept.read_text() == LONG


def test_the_file_whose_preview_an_outer_listener_drops_is_removed(rt: Any, tmp_path: Path) -> None:
    spill_dir = tmp_path / "spill"
    use_spill(rt, spill_dir)

    def accept_original(execution: Any, result: Any, next_: Any) -> Any:
        next_()
        return Accept()  # the spill's preview is dropped: the inline result stands

    rt.events.on("tools/post-execute", accept_original, prepend=True)
    rt.tools.register(tool("cat", lambda args, ctx: LONG))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.content == (text(LONG),)
    assert spilled_files(spill_dir) == []
