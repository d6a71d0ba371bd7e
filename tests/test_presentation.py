"""The presentation vocabulary: cards, their JSON form, and the fallbacks."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from dsh_actors.errors import LosslessJsonError
from dsh_actors.model import ImageBlock, ToolExecutionFailure, ToolExecutionSuccess, ToolFailure, text
from dsh_actors.presentation import (
    CALL_CARD_CLASSES,
    CARD_CLASSES,
    RESULT_CARD_CLASSES,
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadFileLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatchLine,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    ToolCallView,
    ToolResultProjection,
    ToolResultView,
    WebResultView,
    WebSource,
    generic_call_view,
    generic_result_view,
)

CALL_VIEWS: list[ToolCallView] = [
    GenericCallView(title="echo"),
    GenericCallView(
        title="read_file",
        kind="read",
        raw_input={"path": "a.py", "ranges": [[1, 2]], "deep": {"x": None}},
        content=[text("reading"), ImageBlock(data="aGk=", mime_type="image/png")],
        locations=[FileLocation("a.py", line=3), FileLocation("b.py")],
    ),
    TerminalCallView(title="ls -la"),
    TerminalCallView(title="make", description="build it", cwd="/src"),
    DiffCallView(
        title="edit a.py",
        diffs=[FileDiff("a.py", "old\n", "new\n"), FileDiff("new.py", None, "x\n")],
        locations=[FileLocation("a.py", 1)],
    ),
]

RESULT_VIEWS: list[ToolResultView] = [
    GenericResultView(),
    GenericResultView(title="done", content=[text("ok")]),
    TerminalResultView(),
    TerminalResultView(title="make", output="built\n", exit_code=2, signal="SIGTERM"),
    DiffResultView(diffs=[FileDiff("a.py", "a", "b")]),
    SearchResultView(
        shape="matches",
        truncated=True,
        total=40,
        title="grep foo",
        matches=[SearchFileMatches("a.py", [SearchMatchLine(3, "foo()"), SearchMatchLine(9, "foo = 1")])],
    ),
    SearchResultView(shape="paths", truncated=False, total=2, paths=["a.py", "b/c.py"]),
    ReadResultView(
        path="a.py",
        offset=10,
        lines=[ReadFileLine(10, "x = 1"), ReadFileLine(11, "")],
        total_lines=200,
        title="a.py",
        lang="python",
        content="x = 1\n",
    ),
    ReadResultView(path="empty.txt", offset=5, lines=[], total_lines=0),
    WebResultView(
        kind="search",
        title="pykka",
        sources=[WebSource("pykka", "https://pykka.org", "actors"), WebSource("docs", "https://x.y")],
        answer="an actor library",
        truncated=True,
    ),
    WebResultView(kind="fetch", url="https://pykka.org", status_code=200),
]


def _over_the_wire(view: Any) -> Any:
    return orjson.loads(orjson.dumps(view.to_json()))


@pytest.mark.parametrize("view", CALL_VIEWS, ids=lambda v: type(v).__name__)
def test_every_call_card_survives_a_json_round_trip(view: ToolCallView) -> None:
    back = ToolCallView.from_json(_over_the_wire(view))
    assert back == view
    assert type(back) is type(view)
    assert type(view).from_json(_over_the_wire(view)) == view


@pytest.mark.parametrize("view", RESULT_VIEWS, ids=lambda v: type(v).__name__)
def test_every_result_card_survives_a_json_round_trip(view: ToolResultView) -> None:
    back = ToolResultView.from_json(_over_the_wire(view))
    assert back == view
    assert type(back) is type(view)
    assert type(view).from_json(_over_the_wire(view)) == view


def test_every_card_class_is_exercised_by_the_round_trip_tests() -> None:
    assert {type(v) for v in [*CALL_VIEWS, *RESULT_VIEWS]} == set(CARD_CLASSES)
    assert set(CARD_CLASSES) == {*CALL_CARD_CLASSES, *RESULT_CARD_CLASSES}


def test_to_json_uses_snake_case_keys_puts_the_card_first_and_omits_none() -> None:
    view = DiffCallView(title="t", diffs=[FileDiff("n.py", None, "x")], locations=[FileLocation("n.py")])
    assert view.to_json() == {
        "card": "diff",
        "title": "t",
        "diffs": [{"path": "n.py", "new_text": "x"}],
        "locations": [{"path": "n.py"}],
    }
    assert next(iter(view.to_json())) == "card"
    assert TerminalResultView(exit_code=0).to_json() == {"card": "terminal", "exit_code": 0}
    assert GenericCallView(title="g", content=[text("a")]).to_json() == {
        "card": "generic",
        "title": "g",
        "content": [{"type": "text", "text": "a"}],
        "locations": [],
    }


def test_a_json_null_reads_back_as_an_absent_optional_field() -> None:
    assert ToolResultView.from_json({"card": "terminal", "output": None}) == TerminalResultView()
    assert FileDiff.from_json({"path": "p", "old_text": None, "new_text": ""}) == FileDiff("p", None, "")


def test_every_card_is_an_instance_of_its_family_base_only() -> None:
    for view in CALL_VIEWS:
        assert isinstance(view, ToolCallView) and not isinstance(view, ToolResultView)
    for view in RESULT_VIEWS:
        assert isinstance(view, ToolResultView) and not isinstance(view, ToolCallView)


def test_cards_of_the_same_tag_in_different_families_are_not_equal() -> None:
    assert GenericCallView(title="x") != GenericResultView(title="x")
    assert GenericCallView.card == GenericResultView.card == "generic"


def test_cards_are_frozen_and_hashable() -> None:
    view = GenericCallView(title="t", raw_input={"a": [1]}, locations=[FileLocation("p")])
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.title = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        FileLocation("p").line = 3  # type: ignore[misc]
    assert hash(view) == hash(GenericCallView(title="t", raw_input={"a": [1]}, locations=[FileLocation("p")]))
    assert not hasattr(view, "__dict__")


def test_sequences_become_tuples_and_raw_input_is_a_detached_frozen_copy() -> None:
    raw = {"items": [1, 2]}
    locations = [FileLocation("a")]
    view = GenericCallView(title="t", raw_input=raw, locations=locations, content=[text("c")])
    raw["items"].append(3)
    locations.append(FileLocation("b"))
    assert view.locations == (FileLocation("a"),)
    assert view.content == (text("c"),)
    assert view.raw_input["items"] == (1, 2)
    with pytest.raises(TypeError):
        view.raw_input["new"] = 1
    assert view.to_json()["raw_input"] == {"items": [1, 2]}
    assert SearchResultView(shape="paths", truncated=False, total=1, paths=["p"]).paths == ("p",)


@pytest.mark.parametrize(
    ("build", "path"),
    [
        (lambda: GenericCallView(title=1), "GenericCallView.title"),  # type: ignore[arg-type]
        (lambda: GenericCallView(title="t", kind="nope"), "GenericCallView.kind"),  # type: ignore[arg-type]
        (lambda: GenericCallView(title="t", raw_input={1: "x"}), "GenericCallView.raw_input"),
        (lambda: GenericCallView(title="t", content=["text"]), "GenericCallView.content[0]"),  # type: ignore[list-item]
        (lambda: GenericCallView(title="t", locations=[("p", 1)]), "GenericCallView.locations[0]"),  # type: ignore[list-item]
        (lambda: DiffCallView(title="t", diffs="a.py"), "DiffCallView.diffs"),  # type: ignore[arg-type]
        (lambda: FileLocation("p", line=0), "FileLocation.line"),
        (lambda: FileLocation("p", line=True), "FileLocation.line"),
        (lambda: ReadFileLine(1.0, "x"), "ReadFileLine.number"),  # type: ignore[arg-type]
        (lambda: TerminalResultView(exit_code="1"), "TerminalResultView.exit_code"),  # type: ignore[arg-type]
        (lambda: SearchResultView(shape="files", truncated=False, total=0), "SearchResultView.shape"),  # type: ignore[arg-type]
        (lambda: SearchResultView(shape="paths", truncated=1, total=0), "SearchResultView.truncated"),  # type: ignore[arg-type]
        (lambda: SearchResultView(shape="paths", truncated=False, total=-1), "SearchResultView.total"),
        (lambda: SearchResultView(shape="paths", truncated=False, total=0, paths=[1]), "SearchResultView.paths[0]"),  # type: ignore[list-item]
        (lambda: ReadResultView(path="p", offset=0, lines=[], total_lines=0), "ReadResultView.offset"),
        (lambda: WebResultView(kind="crawl"), "WebResultView.kind"),  # type: ignore[arg-type]
    ],
)
def test_a_card_with_a_field_of_the_wrong_type_cannot_be_built(build: Any, path: str) -> None:
    with pytest.raises(LosslessJsonError) as info:
        build()
    assert info.value.path == path


def test_a_search_card_carries_only_the_list_of_its_shape() -> None:
    with pytest.raises(LosslessJsonError, match="SearchResultView.paths"):
        SearchResultView(shape="matches", truncated=False, total=1, paths=["p"])
    with pytest.raises(LosslessJsonError, match="SearchResultView.matches"):
        SearchResultView(shape="paths", truncated=False, total=1, matches=[SearchFileMatches("p", [])])


def test_a_web_card_carries_only_the_fields_of_its_kind() -> None:
    with pytest.raises(LosslessJsonError, match="WebResultView.url"):
        WebResultView(kind="search", url="https://x")
    with pytest.raises(LosslessJsonError, match="WebResultView.status_code"):
        WebResultView(kind="search", status_code=200)
    with pytest.raises(LosslessJsonError, match="WebResultView.sources"):
        WebResultView(kind="fetch", sources=[WebSource("t", "u")])
    with pytest.raises(LosslessJsonError, match="WebResultView.answer"):
        WebResultView(kind="fetch", answer="a")
    assert WebResultView(kind="fetch", truncated=True).truncated


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("generic", "view: expected an object, got str"),
        ({"title": "t"}, "view: missing field 'card' for call view"),
        (
            {"card": "search", "title": "t"},
            "view.card: unknown call view card 'search' (expected 'generic', 'terminal', 'diff')",
        ),
        ({"card": 3}, "view.card: unknown call view card '3'"),
        ({"card": "generic"}, "view: missing field 'title' for GenericCallView"),
        ({"card": "generic", "title": "t", "rawInput": {}}, "view: unknown field 'rawInput' for GenericCallView"),
        ({"card": "generic", "title": 5}, "view.title: expected a str, got int"),
        ({"card": "generic", "title": "t", "kind": "run"}, "view.kind: must be one of"),
        (
            {"card": "generic", "title": "t", "content": [{"type": "video"}]},
            "view.content[0]: unknown content block type",
        ),
        ({"card": "generic", "title": "t", "locations": {"path": "p"}}, "view.locations: expected a list, got dict"),
        (
            {"card": "generic", "title": "t", "locations": [{"line": 1}]},
            "view.locations[0]: missing field 'path' for FileLocation",
        ),
        (
            {"card": "diff", "title": "t", "diffs": [{"path": "p", "old_text": "a", "new_text": 1}]},
            "view.diffs[0].new_text: expected a str",
        ),
        ({"card": "generic", "title": "t", "raw_input": {"n": float("nan")}}, "view.raw_input"),
    ],
)
def test_malformed_call_view_json_is_rejected_with_the_path_of_the_problem(data: Any, message: str) -> None:
    with pytest.raises(LosslessJsonError) as info:
        ToolCallView.from_json(data)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"card": "terminal", "exit_code": True}, "result.exit_code: expected an int, got bool"),
        (
            {"card": "read", "path": "p", "offset": 1, "lines": [{"number": 0, "text": ""}], "total_lines": 1},
            "result.lines[0].number: must be at least 1 (got 0)",
        ),
        ({"card": "search", "shape": "paths", "total": 1}, "result: missing field 'truncated' for SearchResultView"),
        (
            {
                "card": "search",
                "shape": "matches",
                "truncated": False,
                "total": 1,
                "matches": [{"path": "p", "lines": [{"line": 1}]}],
            },
            "result.matches[0].lines[0]: missing field 'text' for SearchMatchLine",
        ),
        (
            {"card": "web", "kind": "fetch", "sources": [{"title": "t", "url": 1}]},
            "result.sources[0].url: expected a str",
        ),
    ],
)
def test_malformed_result_view_json_is_rejected_with_the_path_of_the_problem(data: Any, message: str) -> None:
    with pytest.raises(LosslessJsonError) as info:
        ToolResultView.from_json(data, path="result")
    assert str(info.value).startswith(message)


def test_a_family_base_reads_its_own_card_and_a_card_class_only_its_own() -> None:
    # The tags generic/terminal/diff exist in both families: the fields decide.
    with pytest.raises(LosslessJsonError, match="unknown field 'locations' for DiffResultView"):
        ToolResultView.from_json(DiffCallView(title="t", diffs=[]).to_json())
    with pytest.raises(LosslessJsonError, match="unknown call view card 'web'"):
        ToolCallView.from_json(WebResultView(kind="fetch").to_json())
    with pytest.raises(LosslessJsonError, match=r"unknown call view card 'terminal' \(expected 'generic'\)"):
        GenericCallView.from_json(TerminalCallView(title="t").to_json())


def test_generic_call_view_shows_the_tool_name_and_its_raw_arguments() -> None:
    assert generic_call_view("echo", {"message": "hi"}) == GenericCallView(title="echo", raw_input={"message": "hi"})
    assert generic_call_view("echo", "not json").raw_input == "not json"
    assert generic_call_view("echo", {"x": object()}) == GenericCallView(title="echo")


def test_generic_result_view_shows_the_raw_result_content_under_the_pending_title() -> None:
    success = ToolExecutionSuccess(value="hi", content=[text("hi")])
    failure = ToolExecutionFailure(error=ToolFailure("boom"), content=[text("Error: boom")])
    assert generic_result_view(success) == GenericResultView(content=(text("hi"),))
    assert generic_result_view(failure) == GenericResultView(content=(text("Error: boom"),))
    assert generic_result_view(failure).title is None


def test_a_result_projection_keeps_only_the_logged_fields_of_a_live_result() -> None:
    success = ToolExecutionSuccess(value={"big": "value"}, content=[text("hi")], meta={"lines": 3})
    failure = ToolExecutionFailure(error=ToolFailure("boom"), content=[text("Error: boom")])
    assert ToolResultProjection.of(success) == ToolResultProjection(
        content=(text("hi"),), is_error=False, error=None, meta={"lines": 3}
    )
    projected = ToolResultProjection.of(failure)
    assert projected.is_error and projected.error == ToolFailure("boom")
    assert not hasattr(projected, "value")
    assert ToolResultProjection([text("x")], is_error=False).content == (text("x"),)


def test_a_broken_presenter_is_a_warning_once_per_tool_and_kind_of_failure_naming_the_fix(library_logs: None) -> None:
    """(A presenter that reads ``result.value`` works live and used to fall
    back to the generic card on replay with only a DEBUG line.)"""
    from loguru import logger

    from dsh_actors import tool
    from dsh_actors.json import materialize

    def present(args: Any, result: Any) -> Any:
        if args["cmd"] == "junk":
            return "not a card"
        return TerminalResultView(output=result.value["stdout"])

    @tool(present_call=lambda args: "not a card", present_result=present)
    def shell_drawn_from_a_log(cmd: str) -> dict[str, str]:
        """Run a command."""
        return {"stdout": cmd}

    live = ToolExecutionSuccess(value={"stdout": "ran"}, content=[text('{"stdout":"ran"}')])
    logged = ToolResultProjection.of(live)
    ls, junk = materialize({"cmd": "ls"}), materialize({"cmd": "junk"})
    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(str(message)), level="WARNING", format="{message}")
    try:
        assert shell_drawn_from_a_log.present_result is not None and shell_drawn_from_a_log.present_call is not None
        assert shell_drawn_from_a_log.present_result(ls, live) == TerminalResultView(output="ran")
        assert messages == []
        for _ in range(3):  # every call, every replay: one warning per kind of failure
            assert shell_drawn_from_a_log.present_result(ls, logged) is None
            assert shell_drawn_from_a_log.present_result(junk, live) is None
            assert shell_drawn_from_a_log.present_call(ls) is None
    finally:
        logger.remove(sink)
    head = 'tool "shell_drawn_from_a_log": '
    assert messages == [
        f"{head}present_result raised AttributeError: 'ToolResultProjection' object has no attribute 'value'; the "
        "generic card is shown instead: fix present_result, or have it return None for the generic card; drawn from "
        "a log (a replay, the dsh-actors command) it gets a ToolResultProjection: content, is_error, error and meta, "
        "no value (keep what the card needs in presentation_meta)\n",
        f"{head}present_result returned a value of type str, not a ToolResultView (or None); the generic card is "
        "shown instead: fix present_result, or have it return None for the generic card; drawn from a log (a "
        "replay, the dsh-actors command) it gets a ToolResultProjection: content, is_error, error and meta, no "
        "value (keep what the card needs in presentation_meta)\n",
        f"{head}present_call returned a value of type str, not a ToolCallView (or None); the generic card is shown "
        "instead: fix present_call, or have it return None for the generic card\n",
    ]
