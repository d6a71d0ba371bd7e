"""Every card in ACP's vocabulary: the fields dsh_actors.acp sends for each
call card and result card, checked against the SDK's own models (the web
card and the shapes the example tools do not produce are covered here; the
example agent's tests cover the rest end to end)."""

from __future__ import annotations

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
    WebResultView,
    materialize,
    text,
)
from dsh_actors.acp import call_fields, message_problem, raw_output, result_fields
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


def test_the_raw_output_is_the_durable_projection_of_the_result() -> None:
    assert raw_output("c1", OK) == {
        "is_error": False,
        "content": [{"type": "text", "text": "raw text"}],
        "error": None,
        "meta": {"k": 1},
    }
    failed = ToolExecutionFailure(error=ToolFailure("boom"), content=(text("Error: boom"),))
    assert raw_output("c1", failed)["error"] == {"message": "boom", "info": None}


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
