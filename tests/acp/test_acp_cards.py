"""Every card in ACP's vocabulary: the fields dsh_actors.acp sends for each
call card and result card, checked against the SDK's own models (the web
card and the shapes the example tools do not produce are covered here; the
example agent's tests cover the rest end to end)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("acp", reason="the acp extra is part of the test extra")

from acp.schema import ToolCallProgress, ToolCallStart

from dsh_actors import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ImageBlock,
    ReadFileLine,
    ReadResultView,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
    ToolProgress,
    ToolResultView,
    WebResultView,
    materialize,
    text,
)
from dsh_actors.acp import RAW_OUTPUT_LIMIT, _cards, call_fields, message_problem, raw_output, result_fields
from dsh_actors.acp._bridge import _progress_fields
from dsh_actors.acp._cards import card_text
from dsh_actors.presentation import SearchFileMatches, SearchMatchLine, WebSource

OK = ToolExecutionSuccess(value="v", content=(text("raw text"),), meta={"k": 1})


def _start(fields: dict) -> dict:
    wire = {**fields, "sessionUpdate": "tool_call", "toolCallId": "c1", "status": "pending"}
    return ToolCallStart.model_validate(wire).model_dump(mode="json", by_alias=True, exclude_none=True)


def _end(fields: dict) -> dict:
    wire = {**fields, "sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}
    return ToolCallProgress.model_validate(wire).model_dump(mode="json", by_alias=True, exclude_none=True)


def _texts(wire: dict) -> list[str]:
    return [item["content"]["text"] for item in wire["content"]]


def test_a_generic_call_card_gives_title_kind_raw_input_content_and_absolute_locations() -> None:
    view = GenericCallView(
        title="read a.py",
        kind="read",
        raw_input=materialize({"path": "a.py"}),
        content=(text("why"),),
        locations=(FileLocation("a.py", 3), FileLocation("/abs/b.py")),
    )
    wire = _start(call_fields(view, materialize({"path": "a.py"}), cwd="/work/p"))
    assert wire["title"] == "read a.py" and wire["kind"] == "read"
    assert wire["rawInput"] == {"path": "a.py"}
    assert _texts(wire) == ["why"]
    assert wire["locations"] == [{"path": "/work/p/a.py", "line": 3}, {"path": "/abs/b.py"}]


def test_a_generic_call_card_without_kind_or_raw_input_is_other_and_shows_no_input() -> None:
    wire = _start(call_fields(GenericCallView(title="t"), materialize({"x": 1})))
    assert wire["kind"] == "other" and "rawInput" not in wire and "content" not in wire


def test_a_terminal_call_card_is_an_execute_call_with_the_arguments_as_raw_input() -> None:
    view = TerminalCallView(title="make test", description="run the tests", cwd="/p")
    wire = _start(call_fields(view, materialize({"command": "make test"})))
    assert (wire["title"], wire["kind"], wire["rawInput"]) == ("make test", "execute", {"command": "make test"})
    assert _texts(wire) == ["run the tests\nin /p"]


def test_a_diff_call_card_shows_the_proposed_diff_and_its_files() -> None:
    view = DiffCallView(title="edit", diffs=(FileDiff("a.txt", "1\n", "2\n"), FileDiff("new.txt", None, "x\n")))
    wire = _start(call_fields(view, materialize({}), cwd="/p"))
    assert wire["kind"] == "edit"
    assert wire["content"] == [
        {"type": "diff", "path": "/p/a.txt", "oldText": "1\n", "newText": "2\n"},
        {"type": "diff", "path": "/p/new.txt", "newText": "x\n"},
    ]
    assert wire["locations"] == [{"path": "/p/a.txt"}, {"path": "/p/new.txt"}]


def test_a_generic_result_card_shows_its_content_or_the_raw_content_and_images() -> None:
    assert _texts(_end(result_fields(GenericResultView(), OK))) == ["raw text"]
    view = GenericResultView(title="done", content=(text("a"), ImageBlock(data="aGk=", mime_type="image/png")))
    wire = _end(result_fields(view, OK))
    assert wire["title"] == "done"
    assert wire["content"][1] == {
        "type": "content",
        "content": {"type": "image", "data": "aGk=", "mimeType": "image/png"},
    }


def test_a_terminal_result_card_shows_output_and_how_it_ended() -> None:
    wire = _end(result_fields(TerminalResultView(output="x```y\n", exit_code=2), OK))
    assert _texts(wire) == ["````\nx```y\n````\nexit code 2"]
    wire = _end(result_fields(TerminalResultView(output="", signal="SIGKILL"), OK))
    assert _texts(wire) == ["killed by SIGKILL"]


def test_a_diff_result_card_is_acp_diff_content() -> None:
    wire = _end(result_fields(DiffResultView(title="wrote", diffs=(FileDiff("/a", "o", "n"),)), OK))
    assert wire["content"] == [{"type": "diff", "path": "/a", "oldText": "o", "newText": "n"}]
    assert wire["title"] == "wrote"


def test_a_read_result_card_is_its_text_fenced_in_its_language() -> None:
    view = ReadResultView(path="a.py", offset=1, lines=(ReadFileLine(1, "x = 1"),), total_lines=1, lang="python")
    assert _texts(_end(result_fields(view, OK))) == ["```python\nx = 1\n```"]
    empty = ReadResultView(path="a.py", offset=9, lines=(), total_lines=2)
    assert _texts(_end(result_fields(empty, OK))) == ["a.py: no lines at line 9 (2 lines)"]


def test_a_search_result_card_is_its_rows_and_says_when_it_was_capped() -> None:
    matches = SearchResultView(
        shape="matches",
        truncated=True,
        total=5,
        matches=(SearchFileMatches("a.py", (SearchMatchLine(2, "TODO"),)),),
    )
    assert _texts(_end(result_fields(matches, OK))) == ["a.py:2: TODO\n[5 in all; the rest are not shown]"]
    paths = SearchResultView(shape="paths", truncated=False, total=2, paths=("a", "b"))
    assert _texts(_end(result_fields(paths, OK))) == ["a\nb"]
    none = SearchResultView(shape="paths", truncated=False, total=0)
    assert _texts(_end(result_fields(none, OK))) == ["no matches"]


def test_a_web_result_card_is_its_answer_and_sources_or_its_url_and_body() -> None:
    search = WebResultView(
        kind="search",
        answer="42",
        sources=(WebSource("Deep Thought", "https://example.org/dt", "the answer"), WebSource("B", "https://b.org")),
    )
    assert _texts(_end(result_fields(search, OK))) == [
        "42\n- [Deep Thought](https://example.org/dt): the answer\n- [B](https://b.org)"
    ]
    fetch = WebResultView(kind="fetch", url="https://example.org", status_code=200, truncated=True)
    assert _texts(_end(result_fields(fetch, OK))) == ["https://example.org (200)\n\nraw text\n[truncated]"]


def test_a_web_source_s_title_and_url_cannot_forge_or_break_its_link() -> None:
    # A page's title and snippet are the page's to choose: "x](https://
    # elsewhere)" ended the link early and pointed it elsewhere, a backtick
    # opened a code span that swallowed the link, a snippet added a link
    # (or HTML) of its own, and a line break broke the list. Read as an
    # editor reads Markdown.
    from markdown_it import MarkdownIt

    sources = (
        WebSource("Fine](https://evil.example) [", "https://good.example/a", "line one\nline two"),
        WebSource("Wiki\nlink", "https://en.wikipedia.org/wiki/Foo_(bar)"),
        WebSource("Odd", "https://x.example/a b<c>\\d"),
        WebSource("B`", "https://b.org", "`[B](https://evil.example/setup.exe) <a href='https://evil.example'>x</a>"),
    )
    (text,) = _texts(_end(result_fields(WebResultView(kind="search", sources=sources), OK)))
    tokens = MarkdownIt("commonmark").parse(text)
    items = [token for token in tokens if token.type == "inline"]
    links = [
        (child.attrs["href"], "".join(c.content for c in item.children[i + 1 :] if c.type == "text").split(":")[0])
        for item in items
        for i, child in enumerate(item.children or ())
        if child.type == "link_open"
    ]
    assert [href for href, _ in links] == [
        "https://good.example/a",
        "https://en.wikipedia.org/wiki/Foo_(bar)",
        "https://x.example/a%20b%3Cc%3E%5Cd",
        "https://b.org",
    ]
    assert len(items) == 4  # one list item a source
    assert not [c for item in items for c in item.children or () if c.type in ("html_inline", "code_inline")]
    assert text.splitlines()[0] == (
        r"- [Fine\]\(https\:\/\/evil\.example\) \[](https://good.example/a): line one line two"
    )
    assert text.splitlines()[1] == "- [Wiki link](<https://en.wikipedia.org/wiki/Foo_(bar)>)"


def test_the_raw_output_is_the_durable_projection_of_the_result() -> None:
    assert raw_output("c1", OK, GenericResultView()) == {
        "is_error": False,
        "content": [{"type": "text", "text": "raw text"}],
        "error": None,
        "meta": {"k": 1},
    }
    failed = ToolExecutionFailure(error=ToolFailure("boom"), content=(text("Error: boom"),))
    assert raw_output("c1", failed, GenericResultView())["error"] == {"message": "boom", "info": None}


# A tool's output as a terminal would paint it: colour (CSI), a window title
# and a hyperlink (OSC, ended by BEL and by ST), a character set (ESC ( B),
# a bell, a NUL, DEL, a C1 CSI, a bidi override, CRLF and a lone CR.
PAINTED = (
    "\x1b[1;31mred\x1b[0m \x1b]0;pwned\x07\x1b]8;;https://x.org\x1b\\link\x1b]8;;\x1b\\\x1b(B"
    "\tbell\x07 nul\x00 del\x7f c1\x9b1m \u202eevil\r\nline\rover"
)
SHOWN = "red link\tbell\\x07 nul\\x00 del\\x7f c1\\x9b1m \\u202eevil\nline\nover"


def test_card_text_leaves_escape_sequences_out_and_shows_other_control_characters() -> None:
    result = ToolExecutionSuccess(value="v", content=(text(PAINTED),))
    wire = _end(result_fields(GenericResultView(title="\x1b]0;t\x07done\x1b[K"), result))
    assert _texts(wire) == [SHOWN]
    assert wire["title"] == "done"
    # Every card's text: a terminal call's title and notes, a fenced output
    # (whose fence outgrows backticks joined by leaving an escape out), search rows.
    call = _start(call_fields(TerminalCallView(title="ls\x1b[m", description=PAINTED), materialize({})))
    assert (call["title"], _texts(call)) == ("ls", [SHOWN])
    terminal = _end(result_fields(TerminalResultView(output="``\x1b[0m`\r\n", exit_code=0), OK))
    assert _texts(terminal) == ["````\n```\n````\nexit code 0"]
    paths = SearchResultView(shape="paths", truncated=False, total=1, paths=("a\x1b[2Kb",))
    assert _texts(_end(result_fields(paths, OK))) == ["ab"]
    # What the model got, and the raw output, keep the text as the tool wrote it.
    assert result.content[0].text == PAINTED
    assert raw_output("c1", result, GenericResultView())["content"] == [{"type": "text", "text": PAINTED}]


def test_card_text_shows_bidi_controls_and_keeps_other_format_characters() -> None:
    # Bidi controls reorder what is read: shown. A zero-width joiner inside
    # an emoji, a soft hyphen and a private-use icon (a prompt's glyph) are
    # what the editor should draw: kept.
    family, icon = "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\ue0b0"
    assert card_text(f"{family} \u202eevil\u202c soft\u00adhy {icon}\u2028") == (
        f"{family} \\u202eevil\\u202c soft\u00adhy {icon}\\u2028"
    )


def test_a_progress_line_is_card_text_and_its_meta_keeps_the_message() -> None:
    fields = _progress_fields(ToolProgress(1, 2, "\x1b[32mcopying\x1b[0m a.txt\x07"))
    assert fields["content"][0]["content"]["text"] == "1/2 (50%) copying a.txt\\x07"
    assert fields["_meta"]["dsh_actors"]["progress"]["message"] == "\x1b[32mcopying\x1b[0m a.txt\x07"


def test_a_raw_output_longer_than_the_limit_is_left_out_with_its_size() -> None:
    fits = ToolExecutionSuccess(value="v", content=(text("x" * (RAW_OUTPUT_LIMIT - 100)),))
    assert raw_output("c1", fits, GenericResultView())["content"] == [
        {"type": "text", "text": "x" * (RAW_OUTPUT_LIMIT - 100)}
    ]
    large = ToolExecutionSuccess(value="v", content=(text("x" * RAW_OUTPUT_LIMIT),), meta={"n": 1})
    whole = {
        "is_error": False,
        "content": [{"type": "text", "text": "x" * RAW_OUTPUT_LIMIT}],
        "error": None,
        "meta": {"n": 1},
    }
    size = len(json.dumps(whole, separators=(",", ":")))
    assert raw_output("c1", large, GenericResultView()) == {"is_error": False, "truncated": True, "size": size}
    failed = ToolExecutionFailure(error=ToolFailure("b" * RAW_OUTPUT_LIMIT), content=(text("Error: b"),))
    whole = {
        "is_error": True,
        "content": [{"type": "text", "text": "Error: b"}],
        "error": {"message": "b" * RAW_OUTPUT_LIMIT, "info": None},
        "meta": None,
    }
    size = len(json.dumps(whole, separators=(",", ":")))
    assert raw_output("c1", failed, GenericResultView()) == {"is_error": True, "truncated": True, "size": size}


def _large(n: int = RAW_OUTPUT_LIMIT + 30_000) -> ToolExecutionSuccess:
    rows = "".join(f"test_{i} passed\n" for i in range(n // 15 + 1))[:n]
    return ToolExecutionSuccess(value="v", content=(text(rows), text("tail")), meta={"lines": 6000})


@pytest.mark.parametrize(
    "view",
    [
        GenericResultView(),
        GenericResultView(title="ran tests", content=_large().content),  # the result's own content
        TerminalResultView(output="(the output)", exit_code=0),
        ReadResultView(path="a.py", offset=1, lines=(), total_lines=0, content="(the window)"),
        WebResultView(kind="fetch", url="https://example.org"),
    ],
)
def test_a_large_results_text_is_left_out_of_the_raw_output_when_its_card_shows_it(view: ToolResultView) -> None:
    large = _large()
    out = raw_output("c1", large, view)
    assert out == {"is_error": False, "truncated": True, "size": _size(raw_output_whole(large))}


def _size(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def raw_output_whole(result: ToolExecutionSuccess | ToolExecutionFailure) -> dict:
    return {
        "is_error": result.is_error,
        "content": [{"type": "text", "text": block.text} for block in result.content],
        "error": None if result.error is None else {"message": result.error.message, "info": None},
        "meta": None if result.meta is None else dict(result.meta),
    }


@pytest.mark.parametrize(
    "view",
    [
        GenericResultView(title="ran tests", content=(text("6000 lines, 0 failures"),)),
        DiffResultView(diffs=(FileDiff("/a", "o", "n"),)),
        SearchResultView(shape="paths", truncated=False, total=1, paths=("a",)),
        WebResultView(kind="search", answer="an answer"),
    ],
)
def test_a_large_result_beside_a_card_showing_something_else_is_sent_up_to_the_limit(view: ToolResultView) -> None:
    large = _large()
    whole = raw_output_whole(large)
    out = raw_output("c1", large, view)
    assert _size(out) <= RAW_OUTPUT_LIMIT
    assert out["truncated"] is True and out["size"] == _size(whole)
    assert out["is_error"] is False and out["error"] is None
    # The first text block cut to a prefix that fills the limit (the rest left out).
    (first,) = out["content"]
    assert first["type"] == "text" and whole["content"][0]["text"].startswith(first["text"])
    assert _size(out) > RAW_OUTPUT_LIMIT - 6
    # A failure's message and meta come after the content, in the room left.
    failed = ToolExecutionFailure(
        error=ToolFailure("\x01" * RAW_OUTPUT_LIMIT), content=(text("Error: \x01"),), meta={"k": "v" * 100}
    )
    out = raw_output("c1", failed, view)
    assert _size(out) <= RAW_OUTPUT_LIMIT
    assert out["content"] == [{"type": "text", "text": "Error: \x01"}]
    message = out["error"]["message"]
    assert message == "\x01" * len(message) and _size(out) > RAW_OUTPUT_LIMIT - 6
    assert out["error"] == {"message": message} and out["meta"] is None  # (no room left for the rest)


@pytest.mark.parametrize("char", ["x", "\x01", "é"])
def test_the_raw_output_is_measured_only_when_its_bound_passes_the_limit(
    char: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[object] = []
    json_len = _cards._json_len
    monkeypatch.setattr(_cards, "_json_len", lambda value: measured.append(value) or json_len(value))
    # Around the limit, with the JSON longest (every character escaped) and
    # shortest: the raw output is whole exactly when its JSON fits.
    for n in range(RAW_OUTPUT_LIMIT - 100, RAW_OUTPUT_LIMIT + 100, 7):
        for length in (n, n // 6):
            result = ToolExecutionSuccess(value="v", content=(text(char * length),))
            whole = raw_output_whole(result)
            size = _size(whole)
            expected = whole if size <= RAW_OUTPUT_LIMIT else {"is_error": False, "truncated": True, "size": size}
            assert raw_output("c1", result, GenericResultView()) == expected
    # A result far under the limit (a sixth of it, its worst escape factor) is not serialized.
    measured.clear()
    small = ToolExecutionSuccess(value="v", content=(text(char * (RAW_OUTPUT_LIMIT // 6 - 100)),), meta={"n": [1.5]})
    assert raw_output("c1", small, GenericResultView()) == raw_output_whole(small)
    assert measured == []


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ([1], "a JSON-RPC message is a JSON object, not list"),
        ({"id": 1, "method": "m"}, 'a JSON-RPC message has "jsonrpc": "2.0"'),
        ({"jsonrpc": "2.0", "id": [1], "method": "m"}, "id must be a string, an integer or null"),
        ({"jsonrpc": "2.0", "id": True, "method": "m"}, "id must be a string, an integer or null"),
        ({"jsonrpc": "2.0", "method": 1}, "method must be a string"),
        ({"jsonrpc": "2.0", "method": "m", "params": 3}, "params must be an object or an array"),
        ({"jsonrpc": "2.0"}, "a message has a method (a request or notification) or an id (a response)"),
        ({"jsonrpc": "2.0", "id": 1}, "a response has a result or an error"),
        ({"jsonrpc": "2.0", "id": 1, "error": "x"}, "a response's error must be an object"),
        ({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {}}, None),
        ({"jsonrpc": "2.0", "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": "a", "result": None}, None),
    ],
)
def test_message_problem_names_what_makes_a_message_malformed(message: object, problem: str | None) -> None:
    assert message_problem(message) == problem
