"""Each card drawn as text: what a terminal shows for every card type."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import (
    DiffResultView,
    FileDiff,
    ImageBlock,
    ReadResultView,
    SearchResultView,
    TerminalResultView,
    ToolOutput,
    ToolResultView,
    WebResultView,
    define_tool,
    text,
)
from dsh_actors.cli.render import LogTree, Style, choose_style, log_entries, render_log
from dsh_actors.model import content_to_json
from dsh_actors.presentation import DiffCallView, ToolResultProjection, WebSource
from dsh_actors.session import (
    LoggedResult,
    call_event,
    ptc_dispatch_event,
    ptc_dispatch_start_event,
    result_event,
)

PLAIN = Style(color=False, unicode=True)


_RAW = (text("raw content"),)


def _draw(view: ToolResultView | None, content: Any = _RAW, *, pending: bool = False, **kw: Any) -> str:
    """One call of a tool whose result card is ``view``, drawn."""
    tool = define_tool(
        name="t", description="", parameters={},
        output=ToolOutput(schema={"type": "json"}, render=lambda a, v: []),
        execute=lambda a, c: None,
        present_result=lambda args, result: view,
        **kw,
    )  # fmt: skip
    events = [call_event(1, 1, "c", "t", {})]
    if not pending:
        events.append(result_event("c", ToolResultProjection(content=tuple(content), is_error=False)))
    lines = render_log(log_entries(events), lambda name: tool if name == "t" else None, PLAIN, steps=False)
    return "\n".join(lines) + "\n"


def test_a_terminal_card_shows_the_output_and_the_exit_status_or_the_signal() -> None:
    assert _draw(TerminalResultView(output="a\nb\n", exit_code=2)) == "✓ c t\n    a\n    b\n    exit 2\n"
    assert _draw(TerminalResultView(output="", signal="SIGKILL")) == "✓ c t\n    killed by SIGKILL\n"
    assert _draw(TerminalResultView()) == "✓ c t\n    (no output)\n"


def test_a_diff_card_is_a_unified_diff_with_context() -> None:
    old = "one\ntwo\nthree\n"
    drawn = _draw(DiffResultView(diffs=(FileDiff("f.txt", old, "one\n2\nthree\n"), FileDiff("same", "x", "x"))))
    assert drawn == (
        "✓ c t\n    --- a/f.txt\n    +++ b/f.txt\n    @@ -1,3 +1,3 @@\n     one\n    -two\n    +2\n     three\n"
        "    same: no changes\n"
    )


def test_a_diff_card_shows_a_changed_line_ending_and_a_missing_final_newline() -> None:
    crlf = _draw(DiffResultView(diffs=(FileDiff("w", "a\r\nb\r\n", "a\nb\n"),)))
    assert crlf == "✓ c t\n    --- a/w\n    +++ b/w\n    @@ -1,2 +1,2 @@\n    -a\\x0d\n    -b\\x0d\n    +a\n    +b\n"
    eol = _draw(DiffResultView(diffs=(FileDiff("n", "a\nb", "a\nb\n"),)))
    assert (
        eol
        == "✓ c t\n    --- a/n\n    +++ b/n\n    @@ -1,2 +1,2 @@\n     a\n    -b\n    \\ No newline at end of file\n    +b\n"
    )
    # Lines split at \n only: a form feed stays in its line.
    feed = _draw(DiffResultView(diffs=(FileDiff("f", "x\fy\n", "x\fz\n"),)))
    assert feed == "✓ c t\n    --- a/f\n    +++ b/f\n    @@ -1 +1 @@\n    -x\\x0cy\n    +x\\x0cz\n"


def test_a_diff_too_costly_to_match_line_by_line_is_one_hunk_between_the_common_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_actors.cli import render

    # (Every other line changed: difflib's time grows with the square of the lines.)
    monkeypatch.setattr(render, "_DIFF_BUDGET", 10)
    old = "".join(f"{n}\n" for n in range(10))
    new = "".join(f"{n}\n" if n in (0, 1, 3, 5, 9) else f"x{n}\n" for n in range(10))
    drawn = _draw(DiffResultView(diffs=(FileDiff("f", old, new),)))
    hunk = "".join(f"    -{n}\n" for n in range(2, 9)) + "".join(f"    +{line}\n" for line in new.split()[2:9])
    assert drawn == "✓ c t\n    --- a/f\n    +++ b/f\n    @@ -1,10 +1,10 @@\n     0\n     1\n" + hunk + "     9\n"


@settings(max_examples=300, deadline=None)
@given(
    old=st.lists(st.sampled_from("abcd"), max_size=12),
    new=st.lists(st.sampled_from("abcd"), max_size=12),
    budget=st.sampled_from((0, 30, 1_000_000)),
)
def test_a_diff_card_within_or_past_its_budget_turns_the_old_lines_into_the_new(
    old: list[str], new: list[str], budget: int
) -> None:
    from dsh_actors.cli import render

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(render, "_DIFF_BUDGET", budget)
        lines = render._diff_lines(
            (FileDiff("f", "".join(x + "\n" for x in old), "".join(x + "\n" for x in new)),), PLAIN
        )
    if old == new:
        assert lines == ["f: no changes"]
        return
    rebuilt, at = [], 0  # new, from old and the hunks
    for line in lines[2:]:
        if line.startswith("@@"):
            start, _, length = line.split()[1][1:].partition(",")
            first = int(start) - (length != "0")
            rebuilt.extend(old[at:first])
            at = first
        elif line[0] in " -":
            assert line[1:] == old[at]
            at += 1
        if line[0] in " +":
            rebuilt.append(line[1:])
    assert rebuilt + old[at:] == new


def test_a_pending_diff_call_shows_its_diff() -> None:
    drawn = _draw(
        None, pending=True, present_call=lambda args: DiffCallView(title="edit a", diffs=(FileDiff("a", None, "x\n"),))
    )
    diff = "    --- /dev/null\n    +++ b/a\n    @@ -0,0 +1 @@\n    +x\n"
    assert drawn == "· c t · edit a  never started (no tool/start logged)\n" + diff


def test_arguments_too_long_for_the_head_that_are_no_object_are_listed_as_json() -> None:
    from dsh_actors.presentation import GenericCallView

    raw = ["x" * 50, {"k": [1, None]}, "y" * 40]
    drawn = _draw(None, pending=True, present_call=lambda args: GenericCallView(title="t", raw_input=raw))
    assert drawn.split("\n")[1] == '    ["' + "x" * 50 + '",{"k":[1,null]},"' + "y" * 40 + '"]'


def test_a_read_card_numbers_its_lines_and_says_when_the_window_is_empty() -> None:
    lines = tuple(__import__("dsh_actors").ReadFileLine(n, f"line {n}") for n in (9, 10))
    drawn = _draw(ReadResultView(path="a.py", offset=9, lines=lines, total_lines=20, lang="python"))
    assert drawn == "✓ c t\n    a.py · lines 9–10 of 20 (python)\n     9 │ line 9\n    10 │ line 10\n"
    empty = _draw(ReadResultView(path="a.py", offset=30, lines=(), total_lines=20))
    assert "a.py: no lines at offset 30 (the file has 20)" in empty


def test_a_search_card_groups_matches_by_file_and_says_when_it_was_capped() -> None:
    from dsh_actors.presentation import SearchFileMatches, SearchMatchLine

    view = SearchResultView(
        shape="matches", truncated=True, total=7,
        matches=(SearchFileMatches("a.py", (SearchMatchLine(3, "x = 1"), SearchMatchLine(12, "x += 1"))),),
    )  # fmt: skip
    assert (
        _draw(view)
        == "✓ c t\n    a.py\n       3: x = 1\n      12: x += 1\n    7 matches in 1 file (truncated: 2 shown)\n"
    )
    paths = SearchResultView(shape="paths", truncated=False, total=2, paths=("a.py", "b.py"))
    assert _draw(paths) == "✓ c t\n    a.py\n    b.py\n    2 paths\n"


def test_a_web_card_shows_the_sources_of_a_search_and_the_status_of_a_fetch() -> None:
    search = WebResultView(kind="search", answer="Yes.", sources=(WebSource("Docs", "https://d.example", "a snippet"),))
    assert _draw(search) == "✓ c t\n    Yes.\n    [1] Docs https://d.example\n        a snippet\n"
    fetch = WebResultView(kind="fetch", url="https://d.example", status_code=200, truncated=True)
    assert _draw(fetch) == "✓ c t\n    https://d.example → 200 (truncated)\n    raw content\n"


def test_a_generic_card_shows_its_title_and_every_content_block() -> None:
    blocks = (text("first\nsecond"), ImageBlock(data="AAAA", mime_type="image/png"))
    drawn = _draw(None, content=blocks)
    assert drawn == "✓ c t\n    first\n    second\n    [image image/png, about 3 bytes]\n"


def test_a_log_written_before_images_were_checked_still_replays_its_image_as_logged() -> None:
    """(ImageBlock now refuses data that is not base64; a log that holds
    such an image, written before, still reads back.)"""
    event = result_event("c", ToolResultProjection(content=(ImageBlock("AAAA", "image/png"),), is_error=False))
    event["content"][0]["data"] = "data:image/png;base64,AAAA"
    lines = render_log(log_entries([call_event(1, 1, "c", "t", {}), event]), lambda name: None, PLAIN, steps=False)
    assert lines == ["✓ c t", "    [image image/png, about 19 bytes]"]
    (image,) = LoggedResult.from_event(event).content
    assert type(image) is ImageBlock and content_to_json([image]) == event["content"]


def test_ascii_glyphs_are_used_when_the_terminal_is_not_utf8() -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    style = choose_style(stream, "never")
    assert style == Style(color=False, unicode=False)
    events = [
        call_event(1, 1, "c", "x", {}),
        result_event("c", ToolResultProjection(content=(text("ok"),), is_error=False)),
    ]
    assert render_log(log_entries(events), lambda name: None, style) == ["-- turn 1, step 1 --", "ok c x", "    ok"]


class _Tty(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("no_color", "expected"), [(None, True), ("1", False), ("", True)])
def test_auto_colour_needs_a_terminal_and_no_NO_COLOR(
    monkeypatch: pytest.MonkeyPatch, no_color: str | None, expected: bool
) -> None:
    if no_color is not None:
        monkeypatch.setenv("NO_COLOR", no_color)
    assert choose_style(_Tty(), "auto").color is expected
    assert choose_style(io.StringIO(), "auto").color is False


def test_agents_sharing_a_session_with_the_same_step_and_call_id_each_get_their_own_result() -> None:
    # Interleaved: a's call, b's call, a's result, b's result, all turn 1,
    # step 1, id c: each result goes to its own agent's call.
    def result(word: str, agent: str) -> dict[str, Any]:
        projection = ToolResultProjection(content=(text(word),), is_error=False)
        return result_event("c", projection, turn=1, step=1, agent=agent)

    events = [
        call_event(1, 1, "c", "x", {"who": "a"}, agent="a"),
        call_event(1, 1, "c", "x", {"who": "b"}, agent="b"),
        result("a's", "a"),
        result("b's", "b"),
    ]
    entries = log_entries(events)
    assert [(e.arguments, e.result.content[0].text if e.result else None) for e in entries] == [
        ({"who": "a"}, "a's"),
        ({"who": "b"}, "b's"),
    ]


def test_a_raw_definitions_broken_presenters_draw_the_generic_cards_and_are_warned_about_once_per_kind(
    library_logs: None,
) -> None:
    # Before, the command drew the generic cards silently: the author never
    # learned why the tool's own cards did not show.
    from loguru import logger

    from dsh_actors import ToolDefinition

    def present_call(args: Any) -> Any:
        raise KeyError("path")

    raw = ToolDefinition(
        name="raw_cards_in_the_command", description="", parameters={"type": "object"},
        output=ToolOutput(schema={}, render=lambda a, v: []), execute=lambda a, c: None,
        present_call=present_call, present_result=lambda args, result: "not a card",
    )  # fmt: skip
    projection = ToolResultProjection(content=(text("raw content"),), is_error=False)
    entries = log_entries([call_event(1, 1, "c", raw.name, {"path": "a"}), result_event("c", projection)])
    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(str(message)), level="WARNING", format="{message}")
    try:
        for _ in range(2):  # every replay draws the cards again: one warning per kind of failure
            lines = render_log(entries, lambda name: raw if name == raw.name else None, PLAIN, steps=False)
            assert lines == ['✓ c raw_cards_in_the_command · {"path":"a"}', "    raw content"]
    finally:
        logger.remove(sink)
    head = 'tool "raw_cards_in_the_command": '
    assert messages == [
        f"{head}present_call raised KeyError: 'path'; the generic card is shown instead: fix present_call, or have "
        "it return None for the generic card\n",
        f"{head}present_result returned a value of type str, not a ToolResultView (or None); the generic card is "
        "shown instead: fix present_result, or have it return None for the generic card; drawn from a log (a "
        "replay, the dsh-actors command) it gets a ToolResultProjection: content, is_error, error and meta, no "
        "value (keep what the card needs in presentation_meta)\n",
    ]


def test_a_sub_call_logged_after_its_call_is_complete_is_one_whose_call_is_not_in_the_log() -> None:
    # A complete call (its result, every sub-call's, no approval awaiting a
    # decision) is handed out and forgotten: nothing later changes it.
    ok = ToolResultProjection(content=(text("ok"),), is_error=False)
    events = [
        call_event(1, 1, "rc", "run_code", {}),
        ptc_dispatch_start_event("rc", "rc", "rc:ptc:1", "t", {}),
        result_event("rc", ok),  # (its sub-call still open: it waits for it)
        ptc_dispatch_event("rc", "rc", "rc:ptc:1", "t", False, [text("sub")], None, None),
        ptc_dispatch_start_event("rc", "rc", "rc:ptc:2", "t", {}),
    ]
    first, late = log_entries(events)
    assert (first.call_id, [child.call_id for child in first.children]) == ("rc", ["rc:ptc:1"])
    assert (late.call_id, late.logged_call, [child.call_id for child in late.children]) == ("rc", False, ["rc:ptc:2"])
    tree = LogTree()
    handed = [[entry.call_id for entry in tree.feed(event, index)] for index, event in enumerate(events)]
    assert handed == [[], [], [], ["rc"], []]
    assert [entry.call_id for entry in tree.finish()] == ["rc"]


def test_a_call_deferred_again_then_settled_is_forgotten_once_drawn() -> None:
    # A resume that defers a call again and halts before asking settles it
    # without the request that decision waits for. Before, the tree kept
    # each such call (its result's content too) after drawing it: a replay
    # held every one of a long log's.
    import gc
    import tracemalloc

    from dsh_actors.session import INTERRUPTED, approval_event, approval_request_event, batch_event

    def step(i: int) -> list[dict[str, Any]]:
        call_id = f"call-{i:06d}"
        return [
            batch_event(1, i, [(call_id, "refund", {})], agent="a"),
            call_event(1, i, call_id, "refund", {}, agent="a"),
            approval_request_event(call_id, f"s{i}", "refund", "why", None, turn=1, step=i, agent="a"),
            approval_event(call_id, f"s{i}", "deferred"),
            result_event(call_id, INTERRUPTED, turn=1, step=i, agent="a"),
        ]

    tree = LogTree()
    index = 0

    def feed(steps: range) -> None:
        nonlocal index
        for i in steps:
            for event in step(i):
                assert [entry.call_id for entry in tree.feed(event, index)] == (
                    [] if index % 5 < 4 else [event["call_id"]]
                )
                index += 1

    feed(range(10))  # (what the first steps allocate and every later one reuses)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        feed(range(10, 1_010))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 32 * 1024, held
    assert tree.finish() == []
