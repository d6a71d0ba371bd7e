"""policies.spill: oversized text results move to a file; the model gets a
head/tail preview and the path, never more than the cap."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from loguru import logger
from policy_helpers import call, run_one, tool

import policies
from dsh_actors import (
    Accept,
    Agent,
    Block,
    ImageBlock,
    InvalidStateError,
    TextBlock,
    ToolExecutionInput,
    ToolOutput,
    UserMessage,
    define_tool,
    text,
)
from policies.spill import agent_folder, preview, required_cap

CAP = 1024
MAIN = Agent("main")


@pytest.fixture
def spill_dir(tmp_path: Path) -> Path:
    return tmp_path / "spill"


@pytest.fixture
def warnings(library_logs: None) -> Iterator[list[str]]:
    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(str(message)), level="WARNING", format="{message}")
    try:
        yield messages
    finally:
        logger.remove(sink)


def big(n: int = 10_000, char: str = "x") -> str:
    return "HEAD-" + char * n + "-TAIL"


def spilled_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def only_text(result: Any) -> str:
    (block,) = result.content
    assert type(block) is TextBlock
    return block.text


def use_spill(rt: Any, directory: Path, cap: int = CAP) -> Any:
    return rt.use(policies.spill, directory=directory, max_inline_bytes=cap)


def test_a_long_text_result_is_spilled_to_a_file_and_previewed_within_the_cap(rt: Any, spill_dir: Path) -> None:
    long = big()
    use_spill(rt, spill_dir)
    rt.tools.register(tool("cat", lambda args, ctx: long))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert not result.is_error and result.value == long  # the value is untouched
    shown = only_text(result)
    assert len(shown.encode()) <= CAP
    assert shown.startswith("HEAD-x") and shown.endswith("x-TAIL")
    (path,) = spilled_files(spill_dir)
    assert str(path) in shown
    assert f"({len(long)} bytes)" in shown
    assert path.read_text() == long
    assert path.parent.parent == spill_dir
    assert path.parent.name == agent_folder(MAIN)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_result_at_or_under_the_cap_is_left_alone(rt: Any, spill_dir: Path) -> None:
    exact = "y" * CAP
    use_spill(rt, spill_dir)
    rt.tools.register(tool("cat", lambda args, ctx: exact))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.content == (text(exact),)
    assert spilled_files(spill_dir) == []


def test_the_cap_counts_utf8_bytes_and_the_preview_cuts_on_character_boundaries(rt: Any, spill_dir: Path) -> None:
    long = "é€😀" * 2000  # 2, 3 and 4 bytes per character
    use_spill(rt, spill_dir)
    rt.tools.register(tool("cat", lambda args, ctx: long))

    shown = only_text(run_one(rt, call("cat"), agent=MAIN))

    assert len(shown.encode("utf-8")) <= CAP
    head, _, rest = shown.partition("\n[... ")
    tail = rest.split(" ...]\n", 1)[1]
    assert head and long.startswith(head)
    assert tail and long.endswith(tail)


def test_several_text_blocks_are_spilled_together(rt: Any, spill_dir: Path) -> None:
    parts = [big(3000, "a"), big(3000, "b")]
    definition = define_tool(
        name="multi",
        description="two blocks",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(p) for p in parts]),
        execute=lambda args, ctx: "v",
    )
    use_spill(rt, spill_dir)
    rt.tools.register(definition)

    shown = only_text(run_one(rt, call("multi"), agent=MAIN))

    (path,) = spilled_files(spill_dir)
    assert path.read_text() == "\n".join(parts)
    assert len(shown.encode()) <= CAP


def test_a_result_with_an_image_is_never_spilled(rt: Any, spill_dir: Path) -> None:
    long = big()
    definition = define_tool(
        name="shot",
        description="text and an image",
        parameters={},
        output=ToolOutput(
            schema={"type": "string"},
            render=lambda args, value: [text(value), ImageBlock(data="AAAA", mime_type="image/png")],
        ),
        execute=lambda args, ctx: long,
    )
    use_spill(rt, spill_dir)
    rt.tools.register(definition)

    result = run_one(rt, call("shot"), agent=MAIN)

    assert len(result.content) == 2 and result.content[0] == text(long)
    assert spilled_files(spill_dir) == []


def test_a_nested_call_is_never_spilled(rt: Any, spill_dir: Path) -> None:
    long = big()
    nested: list[Any] = []

    def composite(args: Any, ctx: Any) -> Any:
        inner = rt.tools.dispatch(
            ToolExecutionInput(
                call_id=f"{ctx.call_id}:inner",
                root_call_id=ctx.root_call_id,
                name="cat",
                arguments={},
                signal=ctx.signal,
                agent=ctx.agent,
                parent=ctx.token,
            )
        )
        nested.append(inner)
        return "done"

    use_spill(rt, spill_dir)
    rt.tools.register(tool("cat", lambda args, ctx: long))
    rt.tools.register(tool("composite", composite))

    assert not run_one(rt, call("composite"), agent=MAIN).is_error

    (inner,) = nested
    assert inner.content == (text(long),)
    assert spilled_files(spill_dir) == []


def test_a_value_replacement_is_left_alone(rt: Any, spill_dir: Path) -> None:
    long = big()

    def replace_value(execution: Any, result: Any, next_: Any) -> Any:
        return Accept(value=long)

    use_spill(rt, spill_dir)
    rt.events.on("tools/post-execute", replace_value)
    rt.tools.register(tool("cat", lambda args, ctx: "short"))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.value == long and result.content == (text(long),)
    assert spilled_files(spill_dir) == []


def test_a_block_is_left_alone(rt: Any, spill_dir: Path) -> None:
    long = big()

    def block(execution: Any, result: Any, next_: Any) -> Any:
        return Block(feedback=[text(long)])

    use_spill(rt, spill_dir)
    rt.events.on("tools/post-execute", block)
    rt.tools.register(tool("cat", lambda args, ctx: "short"))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.is_error and result.content == (text(long),)
    assert spilled_files(spill_dir) == []


def test_a_content_replacement_from_another_listener_is_bounded_and_every_context_is_kept(
    rt: Any, spill_dir: Path
) -> None:
    long = big()

    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(UserMessage([text("from the body")]))
        return "short"

    def enlarge(execution: Any, result: Any, next_: Any) -> Any:
        return Accept(content=[text(long)], additional_contexts=[UserMessage([text("from a listener")])])

    use_spill(rt, spill_dir)
    rt.events.on("tools/post-execute", enlarge)
    rt.tools.register(tool("cat", body))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.value == "short"
    assert len(only_text(result).encode()) <= CAP
    assert [c.content[0].text for c in result.additional_contexts] == ["from the body", "from a listener"]
    (path,) = spilled_files(spill_dir)
    assert path.read_text() == long


def test_a_long_failure_that_reaches_post_execute_is_bounded_too(rt: Any, spill_dir: Path) -> None:
    message = big()

    def body(args: Any, ctx: Any) -> Any:
        raise RuntimeError(message)

    use_spill(rt, spill_dir)
    rt.tools.register(tool("boom", body))

    result = run_one(rt, call("boom"), agent=MAIN)

    assert result.is_error and result.error.message == message  # the structured error is kept
    assert len(only_text(result).encode()) <= CAP
    (path,) = spilled_files(spill_dir)
    assert path.read_text() == "Error: " + message


def test_a_failure_it_never_saw_is_not_spilled(rt: Any, spill_dir: Path) -> None:
    message = big()

    def throwing_wrapper(execution: Any, next_: Any) -> Any:
        raise RuntimeError(message)  # a throwing wrapper skips post-execute

    use_spill(rt, spill_dir)
    rt.events.on("tools/execute", throwing_wrapper)
    rt.tools.register(tool("cat"))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.content == (text("Error: " + message),)
    assert spilled_files(spill_dir) == []


def test_ids_from_outside_cannot_escape_the_directory(rt: Any, spill_dir: Path) -> None:
    long = big()
    sneaky = Agent("../../..", parent=Agent("/etc"))
    use_spill(rt, spill_dir)
    rt.tools.register(tool("cat", lambda args, ctx: long))

    run_one(rt, call("cat", id="../../x/../../passwd"), agent=sneaky)
    run_one(
        rt,
        call(
            "cat",
            id="..",
        ),
        agent=Agent(".."),
    )
    run_one(rt, call("cat", id="/abs\0olute"), agent=None)

    files = spilled_files(spill_dir)
    assert len(files) == 3
    for path in files:
        assert path.resolve().parent.parent == spill_dir.resolve()
        assert not path.parent.name.startswith(".") and not path.name.startswith(".")
    assert {p.parent.name for p in files} >= {"_no-agent"}


def test_distinct_agents_whose_ids_look_alike_get_distinct_folders() -> None:
    assert agent_folder(Agent("a/b")) != agent_folder(Agent("b", parent=Agent("a")))
    assert agent_folder(Agent("a_b")) != agent_folder(Agent("b", parent=Agent("a")))
    assert "/" not in agent_folder(Agent("x/y"))


def test_a_symlink_planted_as_the_agent_folder_is_refused_and_the_result_stays_inline(
    rt: Any, spill_dir: Path, tmp_path: Path, warnings: list[str]
) -> None:
    long = big()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spill_dir.mkdir(mode=0o700)
    (spill_dir / agent_folder(MAIN)).symlink_to(elsewhere)
    use_spill(rt, spill_dir)
    rt.tools.register(tool("cat", lambda args, ctx: long))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.content == (text(long),)
    assert list(elsewhere.iterdir()) == []
    assert any("could not spill" in m for m in warnings)


def test_an_agent_folder_open_to_others_is_refused(rt: Any, spill_dir: Path, warnings: list[str]) -> None:
    long = big()
    spill_dir.mkdir(mode=0o700)
    folder = spill_dir / agent_folder(MAIN)
    folder.mkdir()
    folder.chmod(0o777)
    use_spill(rt, spill_dir)
    rt.tools.register(tool("cat", lambda args, ctx: long))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.content == (text(long),)
    assert list(folder.iterdir()) == []
    assert any("open to group or others" in m for m in warnings)


def test_a_write_failure_keeps_the_inline_result_and_logs_a_warning(
    rt: Any, tmp_path: Path, warnings: list[str]
) -> None:
    long = big()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    use_spill(rt, blocker / "spill")  # cannot be created: its parent is a file
    rt.tools.register(tool("cat", lambda args, ctx: long))

    result = run_one(rt, call("cat"), agent=MAIN)

    assert result.content == (text(long),)
    assert any("could not spill" in m and "keeping it inline" in m for m in warnings)


def test_a_second_application_is_refused_until_the_first_is_disposed(rt: Any, spill_dir: Path) -> None:
    # (A second one spilled the first one's preview, and the first then
    # removed its own file, the full output: the model was shown a file
    # naming a file that was gone.)
    undo = use_spill(rt, spill_dir)
    with pytest.raises(InvalidStateError, match="policies.spill: it is applied to this runtime already"):
        rt.use(policies.spill, directory=spill_dir / "other", max_inline_bytes=4096)
    assert len(rt.events.listeners("tools/post-execute")) == 1
    undo()
    use_spill(rt, spill_dir)  # (disposed: it may be applied again)
    assert len(rt.events.listeners("tools/post-execute")) == 1


def test_disposing_removes_both_listeners(rt: Any, spill_dir: Path) -> None:
    undo = use_spill(rt, spill_dir)
    assert len(rt.events.listeners("tools/post-execute")) == 1
    assert len(rt.events.listeners("tools/ptc-dispatch-log")) == 1
    undo()
    assert rt.events.listeners("tools/post-execute") == ()
    assert rt.events.listeners("tools/ptc-dispatch-log") == ()


# -- the PTC dispatch log copy -------------------------------------------------------


@dataclass(frozen=True)
class Dispatch:
    """What the PTC executor hands the tools/ptc-dispatch-log waterfall."""

    exec: Any
    agent: Agent | None
    sub_call_id: str
    name: str
    is_error: bool
    content: list[Any]


def log_copy(rt: Any, dispatch: Dispatch) -> Any:
    return rt.events.waterfall("tools/ptc-dispatch-log", lambda: dispatch.content, dispatch, agent=dispatch.agent)


def test_the_ptc_dispatch_log_copy_is_bounded(rt: Any, spill_dir: Path) -> None:
    long = big()
    use_spill(rt, spill_dir)

    logged = log_copy(rt, Dispatch(None, MAIN, "c1:ptc:1", "cat", False, [text(long)]))

    (block,) = logged
    assert len(block.text.encode()) <= CAP
    (path,) = spilled_files(spill_dir)
    assert path.name.startswith("c1_ptc_1-") and path.read_text() == long
    assert str(path) in block.text


def test_a_small_or_non_text_ptc_dispatch_log_copy_is_kept(rt: Any, spill_dir: Path) -> None:
    use_spill(rt, spill_dir)
    small = [text("short")]
    mixed = [text(big()), ImageBlock(data="AAAA", mime_type="image/png")]

    assert log_copy(rt, Dispatch(None, MAIN, "c1:ptc:1", "cat", False, small)) == small
    assert log_copy(rt, Dispatch(None, MAIN, "c1:ptc:2", "cat", False, mixed)) == mixed
    assert spilled_files(spill_dir) == []


def test_ptc_log_false_leaves_the_dispatch_log_alone(rt: Any, spill_dir: Path) -> None:
    rt.use(policies.spill, directory=spill_dir, max_inline_bytes=CAP, ptc_log=False)
    assert rt.events.listeners("tools/ptc-dispatch-log") == ()


# -- the preview and the config ---------------------------------------------------------


@given(st.text(min_size=1, max_size=3000), st.integers(min_value=0, max_value=2000))
def test_a_preview_never_exceeds_its_cap_and_keeps_a_head_and_a_tail(body: str, room: int) -> None:
    path = "/spill/main-0123abcd/c1-00ff00ff.txt"
    cap = required_cap("/spill") + room
    full = body * 3
    shown = preview(full, path, cap)
    assert len(shown.encode("utf-8")) <= cap
    at = shown.index(f" is in {path} ...]\n")
    start = shown.rindex("\n[... ", 0, at)
    head, locator, tail = shown[:start], shown[start:at], shown[at + len(f" is in {path} ...]\n") :]
    assert full.startswith(head) and full.endswith(tail)
    omitted = int(locator.split()[1])
    total = len(full.encode("utf-8"))
    assert f"({total} bytes)" in locator
    assert omitted >= 0
    assert len(head.encode("utf-8")) + omitted + len(tail.encode("utf-8")) == total


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({}, TypeError, "directory= is required"),
        ({"directory": 3}, TypeError, "directory must be a str or a path"),
        ({"directory": b"/tmp"}, TypeError, "directory must be a str or a path"),
        ({"directory": "DIR", "max_inline_bytes": 0}, ValueError, "positive integer"),
        ({"directory": "DIR", "max_inline_bytes": True}, ValueError, "positive integer"),
        ({"directory": "DIR", "max_inline_bytes": 100}, ValueError, "needs at least"),
        ({"directory": "DIR", "ptc_log": "no"}, TypeError, "ptc_log must be True or False"),
        ({"directory": "DIR", "cap": 10}, TypeError, "unknown option"),
    ],
)
def test_bad_config_is_rejected_when_applied(
    rt: Any, spill_dir: Path, config: dict[str, Any], error: type[Exception], match: str
) -> None:
    config = {k: (spill_dir if v == "DIR" else v) for k, v in config.items()}
    with pytest.raises(error, match=match):
        rt.use(policies.spill, **config)
    assert rt.events.listeners("tools/post-execute") == ()


def test_a_directory_that_is_a_file_is_rejected_when_applied(rt: Any, tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(ValueError, match="is not a directory"):
        rt.use(policies.spill, directory=target)


def test_applying_creates_nothing_on_disk(rt: Any, spill_dir: Path) -> None:
    use_spill(rt, spill_dir)
    assert not spill_dir.exists()
    assert os.path.isabs(str(spill_dir))
