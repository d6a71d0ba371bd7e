"""Each card drawn as text: what a terminal shows for every card type."""

from __future__ import annotations

import io
from typing import Any

import pytest

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


def test_a_pending_diff_call_shows_its_diff() -> None:
    drawn = _draw(
        None, pending=True, present_call=lambda args: DiffCallView(title="edit a", diffs=(FileDiff("a", None, "x\n"),))
    )
    diff = "    --- /dev/null\n    +++ b/a\n    @@ -0,0 +1 @@\n    +x\n"
    assert drawn == "· c t · edit a  never started (no tool/start logged)\n" + diff


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
