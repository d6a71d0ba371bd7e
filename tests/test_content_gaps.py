"""Two gaps in content handling: an image's media type is checked where the
block is made (a logged one reads back as logged), and a content hook
(``project_content``, ``finalize_content``) that breaks fails its call as
a broken ``render`` does: the model reads only that the output could not
be rendered, the developer keeps the message and the exception."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_actors import (
    Agent,
    Deny,
    ImageBlock,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    define_tool,
    text,
)
from dsh_actors.errors import InvalidValueError
from dsh_actors.model import content_from_json, content_to_json
from dsh_actors.presentation import ToolResultProjection
from dsh_actors.session import call_event, result_event

# --------------------------------------------------------------------------
# An image's media type
# --------------------------------------------------------------------------

SWAPPED = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"


@pytest.mark.parametrize(
    ("mime_type", "message"),
    [
        ("", "is empty: give the image's type as 'image/<subtype>', such as 'image/png' or 'image/jpeg'"),
        ("png", "'png' is not an image media type: give 'image/png'"),
        ("JPG", "'JPG' is not an image media type: give 'image/jpeg'"),
        ("text/plain", "'text/plain' is not an image media type: give the image's type as 'image/<subtype>'"),
        ("image/", "'image/' is not an image media type: give the image's type as 'image/<subtype>'"),
        ("image", "'image' is not an image media type"),
        (" image/png", "' image/png' is not an image media type"),
        ("image/png\n", "'image/png\\n' is not an image media type"),
        ("data:image/png;base64", "'data:image/png;base64' is not an image media type"),
    ],
)
def test_an_image_media_type_that_is_not_image_slash_subtype_is_refused_where_the_block_is_made(
    mime_type: str, message: str
) -> None:
    """(It used to be taken, and to reach the model as a note that an image
    of type '' was left out, far from the mistake.)"""
    with pytest.raises(InvalidValueError) as caught:
        ImageBlock("aGk=", mime_type)
    assert caught.value.message.startswith(f"ImageBlock mime_type {message}")
    assert caught.value.code == "INVALID_USE"


def test_arguments_given_the_wrong_way_round_are_named_and_a_long_value_is_cut() -> None:
    with pytest.raises(InvalidValueError) as caught:
        ImageBlock("image/png", SWAPPED * 100)
    assert caught.value.message == (
        f"ImageBlock mime_type '{SWAPPED[:40]}...' is not an image media type: "
        "the arguments are the wrong way round, ImageBlock(data, mime_type)"
    )


@pytest.mark.parametrize(
    "mime_type",
    ["image/png", "image/jpeg", "image/gif", "image/webp", "IMAGE/PNG", "image/svg+xml", "image/vnd.microsoft.icon"]
    + ["image/svg+xml; charset=utf-8"],
)
def test_every_image_media_type_is_taken_even_one_the_providers_leave_out(mime_type: str) -> None:
    assert ImageBlock("aGk=", mime_type).mime_type == mime_type


@pytest.mark.parametrize("mime_type", ["", "png", "text/plain"])
def test_a_logged_image_of_any_type_reads_back_and_replays_as_logged(tmp_path: Path, mime_type: str) -> None:
    """(As its data does: a log written before the check still replays.)"""
    logged = [{"type": "image", "data": "aGk=", "mime_type": mime_type}]
    (image,) = content_from_json(logged)
    assert type(image) is ImageBlock and image.mime_type == mime_type
    assert content_to_json([image]) == logged

    path = tmp_path / "log.jsonl"
    event = result_event("c1", ToolResultProjection(content=(ImageBlock("aGk=", "image/png"),), is_error=False))
    event["content"] = logged
    with Session(path) as session:
        session.append(call_event(1, 1, "c1", "t", {}))
        session.append(event)
    with Session.open(path) as replay:
        (image,) = replay.results_by_call()["c1"].content
    assert type(image) is ImageBlock and (image.data, image.mime_type) == ("aGk=", mime_type)


# --------------------------------------------------------------------------
# A content hook that breaks
# --------------------------------------------------------------------------

RAN = 'Error: tool "t" ran, but its output could not be rendered: a fault in the tool, not in the call'
FAILED = 'Error: tool "t" failed, and its error could not be rendered: a fault in the tool, not in the call'


def hook_tool(**hooks: Any) -> Any:
    return define_tool(
        name="t",
        description="A tool.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        execute=lambda args, ctx: "ok",
        **hooks,
    )


def run_one(rt: Any, session: Session | None = None) -> Any:
    batch = ToolBatchInput(
        calls=[ToolCall("c1", "t", "{}")],
        agent=Agent("main", session=session),
        log=None if session is None else LogStep(1, 1),
    )
    return rt.tools.execute(batch).results[0].result


@pytest.fixture
def records(log_records: Any) -> Any:
    return log_records("WARNING")


class SecretError(Exception):
    pass


def leaks(hook: str) -> Any:
    def broken(execution: Any, result: Any) -> Any:
        raise SecretError(f"the key sk-123 is wrong in {hook}")

    return broken


@pytest.mark.parametrize("hook", ["project_content", "finalize_content"])
def test_a_content_hook_that_raises_is_a_render_failure_the_model_reads_without_the_exception(
    rt: Any, records: Any, hook: str
) -> None:
    """(The model used to read ``Error: <hook>: <the exception's text>``.)"""
    rt.tools.register(hook_tool(**{hook: leaks(hook)}))
    session = Session()
    outcome = run_one(rt, session)
    assert outcome.content == (text(RAN),)
    # The developer keeps the message, the code and the exception.
    assert outcome.error.message == f'{hook} of tool "t": raised SecretError: the key sk-123 is wrong in {hook}'
    assert outcome.error.info.code == "POLICY_FAILED"
    cause = outcome.error.exception.__cause__
    assert type(cause) is SecretError
    [record] = records.items
    # (Its traceback is text, errors.log_exception: not the record's exception.)
    assert record["level"].name == "ERROR" and record["exception"] is None
    traceback = record["extra"]["traceback"]
    assert record["message"].endswith("\n" + traceback) and "SecretError" in traceback
    assert "sk-123" in record["message"]
    [event] = [e for e in session.events() if e["type"] == "tool/result"]
    assert event["content"] == [{"type": "text", "text": RAN}]
    assert "sk-123" in event["error"]["message"] and "sk-123" in event["traceback"]


@pytest.mark.parametrize("hook", ["project_content", "finalize_content"])
@pytest.mark.parametrize(
    ("returned", "problem"),
    [
        (
            "sk-123",
            "returned a str, not a list of content blocks (TextBlock, ImageBlock, ReasoningBlock); "
            "return None to keep the content as it is",
        ),
        ([text("a"), {"text": "sk-123"}], "returned content[1]: dict is not a content block"),
    ],
)
def test_a_content_hook_that_returns_something_else_than_content_names_the_fix_to_the_developer_only(
    rt: Any, hook: str, returned: Any, problem: str
) -> None:
    rt.tools.register(hook_tool(**{hook: lambda execution, result: returned}))
    outcome = run_one(rt)
    assert outcome.content == (text(RAN),)
    assert outcome.error.message.startswith(f'{hook} of tool "t": {problem}')
    assert outcome.error.info.code == "POLICY_FAILED"


@pytest.mark.parametrize("hook", ["project_content", "finalize_content"])
def test_a_content_hook_that_breaks_on_a_failure_says_the_call_failed_not_that_it_ran(rt: Any, hook: str) -> None:
    rt.events.on("tools/pre-execute", lambda execution, next_: Deny("no"))
    rt.tools.register(hook_tool(**{hook: leaks(hook)}))
    outcome = run_one(rt)
    assert outcome.content == (text(FAILED),)
    assert outcome.error.info.code == "POLICY_FAILED" and "sk-123" in outcome.error.message
