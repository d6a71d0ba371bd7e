"""The durable session log: JSONL on disk, torn-line recovery, repair, replay.

Threads are synchronised with a Barrier only; ``join(timeout=...)`` is a
deadlock guard, never a way to wait for something to happen.
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors.errors import ErrorCode, InvalidStateError, InvalidTypeError, LosslessJsonError
from dsh_actors.json import FrozenDict, dumps, materialize
from dsh_actors.model import (
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
)
from dsh_actors.presentation import ToolResultProjection, generic_result_view
from dsh_actors.session import (
    REPAIR_ERROR_CODE,
    REPAIR_ERROR_NAME,
    REPAIR_MESSAGE,
    LoggedResult,
    Session,
    SessionCorruptError,
    approval_request_event,
    batch_event,
    call_event,
    ptc_dispatch_event,
    ptc_dispatch_start_event,
    read_step,
    result_event,
    results_by_call,
)

GUARD = 10.0  # seconds; only ever reached if something deadlocks


def ok(value: Any, *texts: str, meta: Any = None) -> ToolExecutionSuccess:
    return ToolExecutionSuccess(value=value, content=tuple(TextBlock(t) for t in texts), meta=meta)


def failed(message: str, info: ToolErrorInfo | None = None) -> ToolExecutionFailure:
    return ToolExecutionFailure(error=ToolFailure(message, info), content=(TextBlock("Error: " + message),))


def file_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def file_events(path: Path) -> list[Any]:
    return [orjson.loads(line) for line in file_lines(path)]


class FailingFile:
    """Wraps a session's file: while ``failing``, a write puts ``partial``
    bytes of its data in the file, then raises ENOSPC."""

    def __init__(self, real: Any, partial: int = 7) -> None:
        self.real = real
        self.partial = partial
        self.failing = True

    def write(self, data: Any) -> int:
        if self.failing:
            self.real.write(bytes(data[: self.partial]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(self.real.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


# --------------------------------------------------------------------------
# Event builders
# --------------------------------------------------------------------------


def test_call_event_has_the_documented_keys_and_keeps_raw_text_arguments() -> None:
    assert call_event(1, 2, "c1", "echo", {"message": "hi"}) == {
        "type": "tool/call",
        "turn": 1,
        "step": 2,
        "call_id": "c1",
        "name": "echo",
        "arguments": {"message": "hi"},
    }
    assert call_event(1, 2, "c2", "echo", '{"message": ')["arguments"] == '{"message": '


def test_call_event_rejects_ids_and_counters_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="turn must be an int"):
        call_event(True, 1, "c1", "echo", {})
    with pytest.raises(TypeError, match="call_id must be a str"):
        call_event(1, 1, 7, "echo", {})  # type: ignore[arg-type]


def test_result_event_logs_content_error_and_meta_but_never_the_value() -> None:
    event = result_event("c1", ok({"secret": "VALUE"}, "shown", meta={"lines": 3}))
    assert event == {
        "type": "tool/result",
        "call_id": "c1",
        "is_error": False,
        "content": [{"type": "text", "text": "shown"}],
        "error": None,
        "meta": {"lines": 3},
    }
    assert "value" not in event and b"VALUE" not in orjson.dumps(event)


def test_result_event_of_a_failure_carries_message_and_structured_info() -> None:
    info = ToolErrorInfo("ToolArgsError", ErrorCode.INVALID_ARGS, reason="raw detail")
    event = result_event("c1", failed("invalid arguments: x", info))
    assert event["is_error"] is True
    assert event["content"] == [{"type": "text", "text": "Error: invalid arguments: x"}]
    assert event["error"] == {
        "message": "invalid arguments: x",
        "info": {"name": "ToolArgsError", "code": "INVALID_ARGS", "reason": "raw detail"},
    }
    # The str enum became a plain str, so the event is lossless JSON.
    assert type(event["error"]["info"]["code"]) is str
    assert result_event("c2", failed("boom"))["error"] == {"message": "boom", "info": None}


def test_ptc_events_carry_pairing_ids_name_and_outcome_but_no_schema() -> None:
    start = ptc_dispatch_start_event("r1", "r1", "r1:ptc:1", "read", {"path": "a"})
    assert start == {
        "type": "tool/ptc-dispatch-start",
        "root_call_id": "r1",
        "parent_call_id": "r1",
        "sub_call_id": "r1:ptc:1",
        "name": "read",
        "arguments": {"path": "a"},
    }
    settled = ptc_dispatch_event(
        "r1", "r1", "r1:ptc:1", "read", True, [TextBlock("Error: gone")], ToolFailure("gone"), None
    )
    assert settled == {
        "type": "tool/ptc-dispatch",
        "root_call_id": "r1",
        "parent_call_id": "r1",
        "sub_call_id": "r1:ptc:1",
        "name": "read",
        "is_error": True,
        "content": [{"type": "text", "text": "Error: gone"}],
        "error": {"message": "gone", "info": None},
        "meta": None,
    }


# --------------------------------------------------------------------------
# Appending and reading
# --------------------------------------------------------------------------


def test_an_in_memory_session_returns_its_events_in_order() -> None:
    with Session() as session:
        assert session.path is None
        session.append(call_event(1, 1, "c1", "echo", {"message": "hi"}))
        session.append(result_event("c1", ok("hi", "hi")))
        session.append({"type": "custom", "n": 1})
        assert [e["type"] for e in session.events()] == ["tool/call", "tool/result", "custom"]
        assert len(session) == 3
        assert "memory" in repr(session) and "3 events" in repr(session)


def test_events_are_fresh_plain_dicts_the_caller_may_change() -> None:
    with Session() as session:
        session.append(call_event(1, 1, "c1", "echo", materialize({"a": [1, {"b": 2}]})))
        first = session.events()
        assert type(first[0]) is dict and type(first[0]["arguments"]["a"]) is list
        first[0]["arguments"]["a"].append("changed")
        assert session.events()[0]["arguments"] == {"a": [1, {"b": 2}]}


def test_a_file_session_writes_one_flushed_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        assert session.path == path and str(path) in repr(session)
        session.append(call_event(1, 1, "c1", "echo", {"message": "multi\nline"}))
        # Readable by another handle while the session is still open.
        assert file_events(path) == session.events()
        session.append(result_event("c1", ok("x", "a\nb")))
        lines = file_lines(path)
        assert len(lines) == 2
        assert [orjson.loads(line)["type"] for line in lines] == ["tool/call", "tool/result"]
        assert file_events(path) == session.events()
    assert "closed" in repr(session)


def test_fsync_mode_fsyncs_every_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    with Session(tmp_path / "log.jsonl", fsync=True) as session:
        session.append({"type": "a"})
        session.append({"type": "b"})
    assert len(synced) == 2


def test_the_canonical_value_never_reaches_the_file(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        session.append(call_event(1, 1, "c1", "lookup", {}))
        session.append(result_event("c1", ok({"token": "CANONICAL-SECRET"}, "3 rows")))
    assert b"CANONICAL-SECRET" not in path.read_bytes()
    assert "value" not in file_events(path)[1]


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not (f == 0 and str(f)[0] == "-"))
    | st.text(st.characters(blacklist_categories=["Cs"])),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(blacklist_categories=["Cs"]), max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(JSON, min_size=1, max_size=5))
def test_any_lossless_event_round_trips_through_the_file_unchanged(payloads: list[Any]) -> None:
    events = [{"type": "custom", "payload": payload} for payload in payloads]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        with Session(path) as session:
            for event in events:
                session.append(event)
            assert session.events() == events
        with Session.open(path) as reopened:
            assert reopened.events() == events


def test_events_built_from_frozen_values_are_logged_as_plain_json() -> None:
    with Session() as session:
        session.append(FrozenDict({"type": "custom", "items": [1, 2]}))
        assert session.events() == [{"type": "custom", "items": [1, 2]}]


def test_an_event_that_is_not_lossless_json_is_rejected_and_not_logged(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        with pytest.raises(LosslessJsonError, match=r"event\.meta\.x: float nan is not lossless JSON"):
            session.append({"type": "custom", "meta": {"x": float("nan")}})
        with pytest.raises(LosslessJsonError, match=r"event\.arguments\[0\]"):
            session.append(call_event(1, 1, "c1", "t", [-0.0]))
        with pytest.raises(LosslessJsonError, match="event.meta"):
            session.append(result_event("c1", ok(None, "x", meta={1, 2})))
        assert session.events() == [] and session.pending_calls() == []
    assert path.read_bytes() == b""


def test_an_event_without_a_type_or_call_id_is_rejected() -> None:
    with Session() as session:
        with pytest.raises(ValueError, match='an event needs a "type" \\(a non-empty str\\)'):
            session.append({"call_id": "c1"})
        with pytest.raises(ValueError, match='"type" must be a non-empty str'):
            session.append({"type": ""})
        with pytest.raises(ValueError, match='tool/call event needs a str "call_id"'):
            session.append({"type": "tool/call", "call_id": 3})
        with pytest.raises(TypeError, match="must be a mapping"):
            session.append(["tool/call"])  # type: ignore[arg-type]
        assert session.events() == []


def test_concurrent_appends_from_eight_threads_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    threads_n, per_thread = 8, 200
    barrier = threading.Barrier(threads_n)
    # A long payload makes a torn or interleaved line easy to notice.
    padding = "x" * 2000

    def worker(index: int) -> None:
        barrier.wait()
        for seq in range(per_thread):
            session.append({"type": "custom", "thread": index, "seq": seq, "pad": padding})

    with Session(path) as session:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(GUARD)
        assert not any(thread.is_alive() for thread in threads), "deadlock"
        events = session.events()
    on_disk = file_events(path)  # every line parses
    assert on_disk == events
    assert len(on_disk) == threads_n * per_thread
    for index in range(threads_n):
        assert [e["seq"] for e in on_disk if e["thread"] == index] == list(range(per_thread))


# --------------------------------------------------------------------------
# Opening files
# --------------------------------------------------------------------------


def test_a_new_session_needs_an_existing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="session log directory does not exist"):
        Session(tmp_path / "missing" / "log.jsonl")
    assert not (tmp_path / "missing").exists()


def test_a_new_session_refuses_a_file_that_already_holds_events(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"type":"custom"}\n')
    with pytest.raises(FileExistsError, match=r"not empty: .*Session\.open\(path\) continues"):
        Session(path)
    assert path.read_bytes() == b'{"type":"custom"}\n'
    notes = tmp_path / "notes.txt"  # (not a log at all: nothing says to continue it as one)
    notes.write_bytes(b"my notes\n")
    with pytest.raises(FileExistsError, match="the file is not empty") as refused:
        Session(notes)
    assert "holds events" not in str(refused.value)
    assert notes.read_bytes() == b"my notes\n"
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with Session(empty) as session:
        session.append({"type": "custom"})
    assert file_events(empty) == [{"type": "custom"}]


def test_open_needs_an_existing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="session log does not exist"):
        Session.open(tmp_path / "nope.jsonl")
    assert not (tmp_path / "nope.jsonl").exists()
    with pytest.raises(IsADirectoryError, match="that is a folder: give the session log's file"):
        Session.open(tmp_path)  # (it said the log did not exist)


def test_a_new_session_on_a_folder_or_a_bad_name_says_so_without_a_repr_of_its_path(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="that is a folder: give the session log's file") as caught:
        Session(tmp_path)  # (it said "Is a directory: PosixPath(...)")
    assert "PosixPath" not in str(caught.value)
    with pytest.raises(OSError) as too_long:
        Session(tmp_path / ("x" * 300 + ".jsonl"))
    assert "PosixPath" not in str(too_long.value)
    assert str(too_long.value).endswith(f"'{tmp_path / ('x' * 300 + '.jsonl')}'")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_open_of_a_path_that_is_no_regular_file_says_so_not_that_it_does_not_exist(tmp_path: Path) -> None:
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="is not a regular file") as caught:
        Session.open(fifo)
    assert not isinstance(caught.value, FileNotFoundError)  # (it said "session log does not exist")
    assert caught.value.filename == str(fifo)


def test_open_reads_the_log_and_continues_it(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with Session(path) as first:
        first.append(call_event(1, 1, "c1", "echo", {}))
        first.append(result_event("c1", ok(1, "one")))
        first.append(call_event(1, 2, "c2", "echo", {}))
    with Session.open(str(path)) as second:
        assert second.events() == first.events()
        assert second.pending_calls() == ["c2"]
        assert second.torn_line is None
        second.append(result_event("c2", ok(2, "two")))
        assert second.pending_calls() == []
    assert [e.get("call_id") for e in file_events(path)] == ["c1", "c1", "c2", "c2"]
    with Session.open(path) as third:
        assert len(third.events()) == 4


def test_a_torn_last_line_is_ignored_and_cut_off_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    good = orjson.dumps(call_event(1, 1, "c1", "echo", {"message": "hi"})) + b"\n"
    torn = orjson.dumps(result_event("c1", ok(1, "hi")))[:25]  # cut mid-JSON
    path.write_bytes(good + torn)
    with Session.open(path) as session:
        assert [e["type"] for e in session.events()] == ["tool/call"]
        assert session.torn_line == 2
        assert session.pending_calls() == ["c1"]
        # Reading alone does not change the file.
        assert path.read_bytes() == good + torn
        session.append(result_event("c1", ok(1, "hi")))
    assert [e["type"] for e in file_events(path)] == ["tool/call", "tool/result"]
    with Session.open(path) as reopened:
        assert reopened.torn_line is None and len(reopened.events()) == 2


@pytest.mark.parametrize(
    "last",
    [
        b'{"type": "b", "x": ',  # cut mid-event
        b'{"type":"b"}}',  # a stray brace typed at its end
        b'{"type":"b"},',  # a trailing comma
        b'{"type":"b","x":"caf\xe9"}',  # a Latin-1 byte
        b'{"type":"b"}\x00',  # a NUL
    ],
    ids=["cut", "brace", "comma", "latin-1", "nul"],
)
def test_a_bad_newline_terminated_last_line_is_corrupt_not_torn(tmp_path: Path, last: bytes) -> None:
    # Each event is written with its newline in one write: a write cut short
    # never ends in one. A last line that does was written so (by hand, say):
    # taken for torn, it was cut off at the next append, and the call it
    # settled counted as open (recover ran its body again).
    path = tmp_path / "log.jsonl"
    data = b'{"type":"a"}\n' + last + b"\n"
    path.write_bytes(data)
    with pytest.raises(SessionCorruptError) as caught:
        Session.open(path)
    assert (caught.value.file, caught.value.lineno) == (str(path), 2)
    assert str(caught.value).startswith(f"{path}:2: event: ")
    assert path.read_bytes() == data
    # Without its newline, the same line may be a write cut short: torn.
    path.write_bytes(data[:-1])
    with Session.open(path) as session:
        assert (session.events(), session.torn_line) == ([{"type": "a"}], 2)


@pytest.mark.parametrize("newline", [b"\n", b""], ids=["terminated", "unterminated"])
@pytest.mark.parametrize(
    ("last", "problem"),
    [
        (b"[1, 2]", "a session event must be a JSON object"),
        (b"null", "a session event must be a JSON object"),
        (b'{"x": 1}', 'an event needs a "type"'),
        (b'{"type": "tool/result"}', 'needs a str "call_id"'),
        # Whole JSON that lossless JSON refuses: it was taken for torn, and
        # cut off (lost) at the next append.
        (b'{"type": "note", "n": 123456789012345678901234567890}', "is out of range"),
        (b'{"type": "note", "x": 1e400}', "number is infinity"),
    ],
)
def test_a_whole_json_last_line_that_is_no_event_is_corrupt_not_torn(
    tmp_path: Path, last: bytes, problem: str, newline: bytes
) -> None:
    # A torn write leaves a cut event, which is not JSON; whole JSON that is
    # no event was written by something else.
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"type":"a"}\n' + last + newline)
    with pytest.raises(SessionCorruptError) as caught:
        Session.open(path)
    assert caught.value.lineno == 2 and problem in str(caught.value)


def test_a_valid_last_line_without_newline_is_kept_and_the_next_append_starts_a_fresh_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"type":"a"}\n{"type":"b"}')
    with Session.open(path) as session:
        assert session.events() == [{"type": "a"}, {"type": "b"}]
        assert session.torn_line is None
        session.append({"type": "c"})
    assert path.read_bytes() == b'{"type":"a"}\n{"type":"b"}\n{"type":"c"}\n'


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'\n{"type":"a"}\n\n  \n{"type":"b"}\n\n')
    with Session.open(path) as session:
        assert session.events() == [{"type": "a"}, {"type": "b"}]
        session.append({"type": "c"})
    with Session.open(path) as session:
        assert [e["type"] for e in session.events()] == ["a", "b", "c"]


def test_an_empty_file_opens_as_an_empty_session(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"")
    with Session.open(path) as session:
        assert session.events() == []
        session.append({"type": "a"})
    assert path.read_bytes() == b'{"type":"a"}\n'


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_open_and_the_first_step_read_read_the_log_a_bounded_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # Session.open read the whole file at once, and so did the first step
    # read after it (a recovery's): a 26 MB log, its bytes and more held at
    # once. Both read a chunk at a time, lines across chunks (a line longer
    # than many) read as they were; a step read then reads its lines.
    from dsh_actors.session import _file

    reads: list[int] = []
    pread = _file._pread

    def recording(fd: int, start: int, end: int) -> bytes:
        reads.append(end - start)
        return pread(fd, start, end)

    monkeypatch.setattr(_file, "_READ_CHUNK", chunk)
    monkeypatch.setattr(_file, "_pread", recording)
    path = tmp_path / "log.jsonl"
    events = [
        batch_event(1, 1, [("c1", "echo", {"message": "x" * 200})], agent="a"),
        call_event(1, 1, "c1", "echo", {"message": "x" * 200}, agent="a"),
        {"type": "note"},
        result_event("c1", ok(1, "one"), turn=1, step=1, agent="a"),
    ]
    good = b"\n".join(orjson.dumps(event) for event in events) + b"\n\n  \n"
    longest = max(len(line) for line in good.split(b"\n"))
    torn = orjson.dumps(call_event(1, 2, "c2", "echo", {}))[:30]
    path.write_bytes(good + torn)
    with Session.open(path) as session:
        assert (len(session), session.torn_line, session.pending_calls()) == (4, 7, [])
        assert len(reads) > 2 and all(0 < size <= chunk for size in reads)
        assert [call.state for call in session.read_step(1, 1, "a").calls] == ["settled"]
        assert all(0 < size <= max(chunk, longest) for size in reads)
        session.append({"type": "c"})
        assert session.step_events(1, 1, "a") == [events[0], events[1], events[3]]
    assert path.read_bytes() == good + b'{"type":"c"}\n'
    # A valid last line without its newline is kept; a corrupt line past
    # the first chunk is named by its number.
    path.write_bytes(good + b'{"type":"d"}')
    with Session.open(path) as session:
        assert (len(session), session.torn_line) == (5, None)
        session.append({"type": "e"})
    assert path.read_bytes() == good + b'{"type":"d"}\n{"type":"e"}\n'
    path.write_bytes(good + b'{"type": "d", "x": -0.0}\n{"type":"e"}\n')
    with pytest.raises(SessionCorruptError) as caught:
        Session.open(path)
    assert caught.value.lineno == 7 and "-0.0" in str(caught.value)


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        (b'{"type": "b", "x": ', "invalid JSON text"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"kind": "b"}', 'an event needs a "type"'),
        (b'{"type": "tool/result"}', 'needs a str "call_id"'),
        (b'{"type": "b", "x": -0.0}', "-0.0"),
        (b'{"type": "b", "x": 99999999999999999999999}', "out of range"),
    ],
)
def test_a_corrupt_line_before_the_last_is_an_error_naming_its_line_number(
    tmp_path: Path, bad_line: bytes, problem: str
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"type":"a"}\n\n' + bad_line + b'\n{"type":"c"}\n')
    with pytest.raises(SessionCorruptError) as caught:
        Session.open(path)
    err = caught.value
    assert isinstance(err, LosslessJsonError) and err.code is ErrorCode.INVALID_JSON
    assert err.lineno == 3 and err.file == str(path)
    assert str(err).startswith(f"{path}:3: ")
    assert problem in str(err)


def test_a_corrupt_line_names_the_way_to_open_the_log(tmp_path: Path) -> None:
    """A log damaged in its middle (a line cut short, edited by hand) is not
    read past: the error says what to do, not only what is wrong."""
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"type":"a"}\n{"type":"tool/call","turn":1,"ste\n{"type":"c"}\n')
    with pytest.raises(SessionCorruptError) as caught:
        Session.open(path)
    assert str(caught.value).startswith(f"{path}:2: ")
    assert str(caught.value).endswith(
        "; the log is damaged at that line (edited by hand, or written by another program or a newer "
        "dsh-actors), and only a torn last line (a write a crash cut short) is cut off: mend or remove that "
        "line in a copy of the log, and open the copy"
    )


@pytest.mark.parametrize("shared", [False, True])
def test_a_malformed_event_of_a_step_read_back_names_its_log_line(tmp_path: Path, shared: bool) -> None:
    """A tool/result whose content a reader refuses (a block type of a newer
    version, an edit by hand) is named by its line, as ``Session.open``
    names a bad line, wherever the step is read back (a recovery, a resume):
    not as a bare ``event.content[0]`` of no file."""
    path = tmp_path / "log.jsonl"
    events: list[dict[str, Any]] = [
        batch_event(1, 1, [("c1", "t", "{}")], agent="a"),
        call_event(1, 1, "c1", "t", {}, agent="a"),
        {**result_event("c1", ok(1, "one"), turn=1, step=1, agent="a"), "content": [{"type": "audio", "data": "x"}]},
    ]
    if not shared:  # (an event naming no agent: every event is read, not the step's lines)
        events.append({"type": "tool/start", "call_id": "c9"})
    with Session(path) as session:
        for event in events:
            session.append(event)
    with Session.open(path) as session:
        for read in (session.read_step, session.step_calls):
            with pytest.raises(SessionCorruptError) as caught:
                read(1, 1, "a")
            assert caught.value.file == str(path) and caught.value.lineno == 3
            assert str(caught.value).startswith(
                f"{path}:3: bad tool/result event: event.content[0]: unknown content block type 'audio'"
            )
        with pytest.raises(SessionCorruptError, match=f"^{path}:3: bad tool/result event: event.content"):
            session.results_by_call()
    with pytest.raises(LosslessJsonError, match=r"^event\.content\[0\]: unknown content block type"):
        read_step(events, 1, 1, "a")  # (events of no file: the field alone)


def test_a_session_on_a_file_keeps_no_event_in_memory_and_reads_the_file(tmp_path: Path) -> None:
    import gc
    import tracemalloc

    events: list[dict[str, Any]] = []
    for i in range(2_000):
        events.append(call_event(1, 1, f"c{i}", "search", {"query": "where is the retry policy configured"}))
        events.append(result_event(f"c{i}", ok(i, "a search hit with some context around the match " * 4)))
    session = Session(tmp_path / "log.jsonl")
    session.append(events[0])  # the first append allocates what every later one reuses
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for event in events[1:]:
            session.append(event)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The events' JSON is about 1.2 MB; pairing ids (all settled here) and
    # the counters are all the session keeps.
    assert held < 64 * 1024, held
    assert len(session) == len(events)
    assert session.pending_calls() == []
    assert session.events() == file_events(tmp_path / "log.jsonl") == [orjson.loads(dumps(e)) for e in events]
    session.close()
    assert session.events()[-1] == orjson.loads(dumps(events[-1]))  # read again by its path


# --------------------------------------------------------------------------
# Write failures and closing
# --------------------------------------------------------------------------


def test_a_failed_write_raises_logs_nothing_and_leaves_the_file_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        session.append(call_event(1, 1, "c1", "echo", {}))
        failing = FailingFile(session._file)
        monkeypatch.setattr(session, "_file", failing)
        with pytest.raises(OSError) as caught:
            session.append(result_event("c1", ok(1, "one")))
        assert caught.value.errno == errno.ENOSPC
        assert [e["type"] for e in session.events()] == ["tool/call"]
        assert session.pending_calls() == ["c1"]
        # The partial bytes were cut off.
        assert [e["type"] for e in file_events(path)] == ["tool/call"]
        failing.failing = False
        session.append(result_event("c1", ok(1, "one")))
        assert file_events(path) == session.events()
        assert session.pending_calls() == []


def test_when_a_torn_write_cannot_be_cut_the_next_append_starts_a_fresh_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EPERM, "cannot truncate")

    with Session(path) as session:
        session.append({"type": "a"})
        failing = FailingFile(session._file, partial=5)
        monkeypatch.setattr(session, "_file", failing)
        monkeypatch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(OSError, match="No space left"):
            session.append({"type": "lost"})
        assert path.read_bytes() == b'{"type":"a"}\n{"typ'
        failing.failing = False
        session.append({"type": "b"})
        assert session.events() == [{"type": "a"}, {"type": "b"}]
    # The torn bytes stand on a line of their own; no good line is merged.
    assert path.read_bytes() == b'{"type":"a"}\n{"typ\n{"type":"b"}\n'


def test_a_failed_fsync_unlogs_the_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"

    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    with Session(path, fsync=True) as session:
        session.append({"type": "a"})
        monkeypatch.setattr(os, "fsync", broken_fsync)
        with pytest.raises(OSError, match="I/O error"):
            session.append({"type": "b"})
        monkeypatch.undo()
        assert session.events() == [{"type": "a"}]
        assert path.read_bytes() == b'{"type":"a"}\n'
        session.append({"type": "c"})
    assert file_events(path) == [{"type": "a"}, {"type": "c"}]


def test_appending_after_close_raises_os_error(tmp_path: Path) -> None:
    for session in (Session(), Session(tmp_path / "log.jsonl")):
        session.append({"type": "a"})
        session.close()
        session.close()  # idempotent
        assert session.closed
        with pytest.raises(OSError, match="session is closed"):
            session.append({"type": "b"})
        assert session.events() == [{"type": "a"}]


def test_a_write_to_a_closed_session_names_its_log_and_how_to_go_on(tmp_path: Path, rt: Any) -> None:
    # It said "session is closed" (and a batch "... could not be written:
    # session is closed"): neither which log nor what to do.
    from dsh_actors import Agent, LogStep, ToolBatchExecutionError, ToolBatchInput, ToolCall, tool

    path = tmp_path / "log.jsonl"
    session = Session(path)
    session.close()
    closed = (
        f"session is closed (its log: {path}); open the log again with Session.open(path) "
        "and give the agent that session: Agent(..., session=Session.open(path))"
    )
    for write in (
        lambda: session.append({"type": "a"}),
        session.hold,
        lambda: session.decide("s1", {"c1": "allowed-once"}),
        lambda: session.close_steps([(1, 1, None)]),
    ):
        with pytest.raises(OSError) as caught:
            write()
        assert str(caught.value) == closed
    memory = Session()
    memory.close()
    with pytest.raises(OSError, match=r"^session is closed \(an in-memory session: it logs nothing more\); give"):
        memory.append({"type": "a"})

    @tool
    def echo(message: str) -> str:
        """Echo the message."""
        return message

    rt.tools.register(echo)
    batch = ToolBatchInput(
        calls=(ToolCall(id="c1", name="echo", arguments={"message": "hi"}),),
        agent=Agent("a", session=session),
        log=LogStep(turn=1, step=1),
    )
    with pytest.raises(ToolBatchExecutionError) as failed:
        rt.tools.execute(batch)
    assert failed.value.code == ErrorCode.BATCH_EXECUTION_FAILED
    assert failed.value.message == f"tool batch failed: the session log could not be written: {closed}"


def test_a_failed_write_names_the_log_and_what_to_do_and_keeps_its_errno(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was "[Errno 28] No space left on device" alone.
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        monkeypatch.setattr(session, "_file", FailingFile(session._file))
        with pytest.raises(OSError) as caught:
            session.append({"type": "a"})
    assert type(caught.value) is OSError and caught.value.errno == errno.ENOSPC
    assert str(caught.value) == (
        f"[Errno {errno.ENOSPC}] No space left on device, writing the session log {path}: the event was not "
        "logged; free space on its disk, then finish the step with rt.tools.recover(agent, turn, step)"
    )


def test_the_context_manager_closes_the_session(tmp_path: Path) -> None:
    with Session(tmp_path / "log.jsonl") as session:
        assert not session.closed
    assert session.closed


def test_on_a_local_disk_the_write_keeps_the_gil_and_on_anything_else_it_is_file_ios(tmp_path: Path) -> None:
    from dsh_actors.session._write import LOCAL_FILE_SYSTEMS, SessionFile, file_system_type

    with Session(tmp_path / "log.jsonl") as session:
        file = session._file
        assert isinstance(file, SessionFile)
        kind = file_system_type(file.fileno())
        if sys.platform.startswith("linux"):
            assert kind is not None
        assert file.holds_gil == (kind in LOCAL_FILE_SYSTEMS)
        session.append({"type": "a"})
    assert (tmp_path / "log.jsonl").read_bytes() == b'{"type":"a"}\n'
    # A FIFO's reader may be a thread of this process, and a character
    # device may block: FileIO.write, which lets other threads run.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with SessionFile(fifo) as pipe:
        assert not pipe.holds_gil
        assert pipe.write(b"x\n") == 2
        assert pipe.read(2) == b"x\n"
    with SessionFile(os.devnull) as null:
        assert not null.holds_gil
    closed = SessionFile(tmp_path / "other.jsonl")
    closed.close()
    with pytest.raises(ValueError):
        closed.write(b"late\n")


def test_the_look_at_the_path_is_the_files_os_stat_however_the_process_moves(tmp_path: Path) -> None:
    from dsh_actors.session._write import SessionFile

    path = tmp_path / "log.jsonl"
    with SessionFile(path) as file:
        file.write(b"abc\n")
        found = os.stat(path)
        assert file.at_path() == (found.st_dev, found.st_ino, found.st_size)
        os.remove(path)
        with pytest.raises(FileNotFoundError):
            file.at_path()


def test_a_large_write_lets_other_threads_run_and_lands_whole(tmp_path: Path) -> None:
    from dsh_actors.session._write import HELD_WRITE_MAX, SessionFile

    with SessionFile(tmp_path / "log.jsonl") as file:
        if not file.holds_gil:
            pytest.skip("this file system's writes release the GIL: nothing to tell apart")
        held: list[int] = []
        real = file._held_write
        assert real is not None

        def spy(fd: int, data: bytes, size: int) -> int:
            held.append(size)
            return real(fd, data, size)

        file._held_write = spy
        small = b"a" * HELD_WRITE_MAX
        large = b"b" * (HELD_WRITE_MAX + 1)
        assert file.write(small) == len(small)
        assert file.write(large) == len(large)  # FileIO.write: the GIL released meanwhile
        assert held == [len(small)]
    assert (tmp_path / "log.jsonl").read_bytes() == small + large


def _run_limited(script: str, path: Path) -> dict[str, Any]:
    """Run ``script`` (which limits its own file size) on the log ``path``
    in a process of its own (the limit is the whole process's); its report,
    having checked that it wrote the way a file there writes."""
    import json
    import subprocess

    from dsh_actors.session._write import SessionFile

    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    with SessionFile(path.parent / "probe") as probe:
        assert report["holds_gil"] == probe.holds_gil  # (True on this project's machines: ext4 or tmpfs)
    return report


_SIZE_LIMIT_SCRIPT = """
import errno, json, os, resource, signal, sys
from dsh_actors import Session
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit write(2) fails with EFBIG instead
path = sys.argv[1]
session = Session(path)
holds_gil = session._file.holds_gil
session.append({"type": "a", "n": 1})
size = os.path.getsize(path)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 5, hard))  # the next line fits 5 bytes: a short write
failure = None
try:
    session.append({"type": "b", "n": 2})
except OSError as err:
    failure = err.errno
after_failure = (os.path.getsize(path), [e["type"] for e in session.events()])
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
session.append({"type": "c", "n": 3})
session.close()
print(json.dumps({"holds_gil": holds_gil, "failure": failure, "size": size,
                  "after_failure": after_failure, "events": [e["type"] for e in Session.open(path).events()]}))
"""


def test_a_short_write_then_a_failed_one_is_cut_back_whichever_way_the_file_writes(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes write(2) itself write part of a line and then fail
    # (EFBIG): the real system call's short write and error, through the
    # GIL-held write on a local disk. A process of its own: the limit is the
    # whole process's.
    path = tmp_path / "log.jsonl"
    report = _run_limited(_SIZE_LIMIT_SCRIPT, path)
    assert report["failure"] == errno.EFBIG
    assert report["after_failure"] == [report["size"], ["a"]]  # the 5 bytes were cut off, nothing logged
    assert report["events"] == ["a", "c"]
    assert path.read_bytes() == b'{"type":"a","n":1}\n{"type":"c","n":3}\n'


_NO_ROOM_SCRIPT = """
import json, os, resource, signal, sys
from dsh_actors import Session
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path = sys.argv[1]
session = Session(path)
holds_gil = session._file.holds_gil
session.append({"type": "a"})
size = os.path.getsize(path)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))  # no room at all: write(2) returns -1 (EFBIG)
failure = None
try:
    session.append({"type": "b"})
except OSError as err:
    failure = err.errno
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
session.append({"type": "c"})
session.close()
print(json.dumps({"holds_gil": holds_gil, "failure": failure, "events": [e["type"] for e in Session.open(path).events()]}))
"""


def test_a_write_that_fails_outright_raises_its_errno_and_logs_nothing(tmp_path: Path) -> None:
    # The GIL-held write gets -1 from write(2) and leaves the error to
    # FileIO.write, which makes the call again and raises it with its errno.
    path = tmp_path / "log.jsonl"
    report = _run_limited(_NO_ROOM_SCRIPT, path)
    assert report["failure"] == errno.EFBIG
    assert report["events"] == ["a", "c"]
    assert path.read_bytes() == b'{"type":"a"}\n{"type":"c"}\n'


# --------------------------------------------------------------------------
# Repair
# --------------------------------------------------------------------------


def test_repair_fails_every_pending_call_in_call_order_once(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        for call_id in ("c1", "c2", "c3", "c4"):
            session.append(call_event(1, 1, call_id, "t", {}))
        session.append(result_event("c2", ok(2, "two")))
        assert session.pending_calls() == ["c1", "c3", "c4"]

        appended = session.repair()
        assert [e["call_id"] for e in appended] == ["c1", "c3", "c4"]
        for event in appended:
            assert event["type"] == "tool/result" and event["is_error"] is True
            assert event["content"] == [{"type": "text", "text": "Error: " + REPAIR_MESSAGE}]
            assert event["error"] == {
                "message": REPAIR_MESSAGE,
                "info": {"name": REPAIR_ERROR_NAME, "code": REPAIR_ERROR_CODE, "reason": None},
            }
        assert session.events()[-3:] == appended
        assert session.pending_calls() == []
        assert session.repair() == []
        assert len(session.events()) == 8
    assert file_events(path) == session.events()


@pytest.mark.parametrize("stepped", ["both in a step", "the first without one"])
def test_repair_settles_two_open_calls_of_one_id_in_a_step_run_again(tmp_path: Path, stepped: str) -> None:
    # A step run again from its start after a crash, and crashed again: its
    # call x is open twice. Each result pairs with the latest open call of
    # its id in its step, so repair's first result closed the second call,
    # and repair then raised KeyError with the first still open.
    path = tmp_path / "log.jsonl"
    first = (
        call_event(1, 1, "x", "t", {})
        if stepped == "both in a step"
        else {"type": "tool/call", "call_id": "x", "name": "t", "arguments": {}}
    )
    path.write_bytes(orjson.dumps(first) + b"\n" + orjson.dumps(call_event(1, 1, "x", "t", {})) + b"\n")
    with Session.open(path) as session:
        assert session.pending_calls() == ["x", "x"]
        assert [e["call_id"] for e in session.repair()] == ["x", "x"]
        assert session.pending_calls() == [] and session.repair() == []
    with Session.open(path) as reopened:
        assert reopened.pending_calls() == []


def test_a_log_that_cannot_be_written_opens_to_be_read_and_refuses_writes_naming_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (A read-only file or file system: Session.open raised the OSError of
    # its "a+" open, so the log could not even be read.)
    path = tmp_path / "log.jsonl"
    path.write_bytes(orjson.dumps(call_event(1, 1, "x", "t", {})) + b"\n")

    def refused(file: Path) -> Any:
        raise PermissionError(errno.EROFS, "Read-only file system", str(file))

    monkeypatch.setattr(Session, "_open_file", staticmethod(refused))
    with Session.open(path) as session:
        assert session.pending_calls() == ["x"] and len(session.events()) == 1
        for write in (lambda: session.append({"type": "note"}), session.repair, session.hold):
            with pytest.raises(InvalidStateError, match=r"was opened read-only \(its file or its file system cannot"):
                write()
    assert path.read_bytes().count(b"\n") == 1


def test_a_line_something_else_appends_to_a_held_log_is_a_clear_error_not_a_parse_crash(tmp_path: Path) -> None:
    # (The lock is advisory: a shell's >> still writes. The session's next
    # write went after that line, as its own; events() raised orjson's own
    # JSONDecodeError, reading bytes changed under it.)
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        session.append({"type": "note", "n": 1})
        with path.open("a") as other:
            other.write('{"type": "foreign", "n": 99}\n')
        with pytest.raises(InvalidStateError, match="grew by 29 bytes this Session did not write while this"):
            session.append(batch_event(1, 1, [("c1", "echo", "{}")]))  # (a step's writes begin: checked)
        assert session.events() == [{"type": "note", "n": 1}]
        with path.open("r+b") as other:
            other.write(b"X")  # (in place: the size stays)
        with pytest.raises(SessionCorruptError, match="the log changed under this session: something else wrote"):
            session.events()


def _replace(path: Path) -> None:
    # An editor's save, sed -i: a new file renamed over the log.
    copy = path.with_name(path.name + ".tmp")
    copy.write_bytes(path.read_bytes())
    os.replace(copy, path)


def _move_away(path: Path) -> None:
    # The log renamed (it still has a name), a copy in its place.
    data = path.read_bytes()
    os.rename(path, path.with_name(path.name + "~"))
    path.write_bytes(data)


def _cut_short(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (_replace, "was replaced by another file"),
        (_move_away, "was replaced by another file"),
        (os.remove, "was removed"),
        (_cut_short, "was cut short (22 bytes; this Session wrote 44)"),
    ],
    ids=["replaced", "moved-away", "removed", "cut-short"],
)
def test_a_write_to_a_log_replaced_removed_or_cut_short_under_its_session_fails(
    tmp_path: Path, edit: Any, what: str
) -> None:
    # The append returned as if logged: its event went to a file no path
    # leads to (lost), or after a cut line (the log no longer opened). The
    # file is checked as a step's writes begin (its tool/batch), and then
    # before every write until it is found as it was.
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        session.append({"type": "note", "n": 1})
        session.append({"type": "note", "n": 2})
        edit(path)
        after = path.read_bytes() if path.exists() else None
        for event in (batch_event(1, 1, [("c1", "echo", "{}")]), {"type": "note", "n": 3}):
            with pytest.raises(InvalidStateError) as caught:
                session.append(event)
            text = str(caught.value)
            assert text.startswith(f"the session log {path} {what}")
            assert "while this Session was writing it: the event was not logged" in text
            assert "open the log again with Session.open(path)" in text
        assert len(session) == 2
    assert (path.read_bytes() if path.exists() else None) == after


def test_a_log_on_a_fifo_is_written_whatever_its_size_says(tmp_path: Path) -> None:
    # (A pipe has no size to keep: the check as a step's writes begin is a
    # regular file's. A pipe's size says 0 whatever was written to it.)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    batch = batch_event(1, 1, [("c1", "echo", "{}")])
    with Session(fifo) as session:  # (opened read-write: it does not wait for a reader)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            session.append({"type": "a"})
            session.append(batch)  # (a step's writes begin: checked)
            session.append({"type": "b"})
            expected = b'{"type":"a"}\n' + orjson.dumps(batch) + b'\n{"type":"b"}\n'
            assert os.read(reader, 4096) == expected
        finally:
            os.close(reader)


def test_a_log_opened_by_a_relative_path_is_written_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (The check before each write looks at the path it was opened by, made
    # absolute then: not at another file of that name in the new folder.)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    batch = batch_event(1, 1, [("c1", "echo", "{}")])
    with Session("log.jsonl") as session:
        session.append({"type": "a"})
        monkeypatch.chdir(tmp_path / "elsewhere")
        (tmp_path / "elsewhere" / "log.jsonl").write_bytes(b"")
        session.append(batch)  # (a step's writes begin: checked)
        session.append({"type": "b"})
    assert file_events(tmp_path / "log.jsonl") == [{"type": "a"}, batch, {"type": "b"}]


def test_a_batch_whose_log_was_replaced_under_its_session_fails_and_runs_nothing(tmp_path: Path, rt: Any) -> None:
    # It reported success: its events were written to the replaced file.
    from dsh_actors import Agent, LogStep, ToolBatchExecutionError, ToolBatchInput, ToolCall, tool

    ran: list[str] = []

    @tool
    def echo(message: str) -> str:
        """Echo the message."""
        ran.append(message)
        return message

    rt.tools.register(echo)
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        agent = Agent("a", session=session)

        def step(n: int) -> Any:
            calls = (ToolCall(id=f"c{n}", name="echo", arguments={"message": str(n)}),)
            return rt.tools.execute(ToolBatchInput(calls=calls, agent=agent, log=LogStep(turn=1, step=n)))

        step(1)
        _replace(path)
        with pytest.raises(ToolBatchExecutionError) as failed:
            step(2)
    assert failed.value.message.startswith(
        f"tool batch failed: the session log could not be written: the session log {path} was replaced"
    )
    assert ran == ["1"]
    with Session.open(path) as reopened:
        assert {e["step"] for e in reopened.events()} == {1}


def test_repair_after_a_crash_completes_the_log(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    lines = [
        orjson.dumps(call_event(3, 1, "c1", "t", {})),
        orjson.dumps(call_event(3, 1, "c2", "t", {})),
        orjson.dumps(result_event("c1", ok(1, "one"))),
    ]
    torn = orjson.dumps(result_event("c2", ok(2, "two")))[:30]
    path.write_bytes(b"\n".join(lines) + b"\n" + torn)
    with Session.open(path) as session:
        assert session.pending_calls() == ["c2"]
        assert [e["call_id"] for e in session.repair()] == ["c2"]
    with Session.open(path) as reopened:
        assert reopened.pending_calls() == [] and reopened.torn_line is None
        assert reopened.repair() == []
        assert reopened.results_by_call()["c2"].error == ToolFailure(
            REPAIR_MESSAGE, ToolErrorInfo(REPAIR_ERROR_NAME, REPAIR_ERROR_CODE)
        )


def test_the_code_of_a_repaired_call_is_a_member_of_the_closed_vocabulary() -> None:
    """(INTERRUPTED used to be no ErrorCode: ErrorCode(code) raised.)"""
    from dsh_actors.session import INTERRUPTED

    session = Session()
    session.append(call_event(1, 1, "c1", "send_email", {"to": "bob"}))
    session.repair()
    [result] = session.results_by_call().values()
    assert result.error is not None and result.error.info is not None
    assert ErrorCode(result.error.info.code) is ErrorCode.INTERRUPTED
    assert INTERRUPTED.error.info is not None and INTERRUPTED.error.info.code == ErrorCode.INTERRUPTED


def test_repair_settles_every_started_sub_call_before_the_pending_calls(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    # The parent was killed while a run_code program had five sub-calls
    # started and one settled: the file ends there.
    lines = [orjson.dumps(call_event(1, 1, "r1", "run_code", {"code": "..."}))]
    for n in range(1, 7):
        lines.append(orjson.dumps(ptc_dispatch_start_event("r1", "r1", f"r1:ptc:{n}", "read", {"n": n})))
    lines.append(orjson.dumps(ptc_dispatch_event("r1", "r1", "r1:ptc:3", "read", False, [TextBlock("x")], None, None)))
    path.write_bytes(b"\n".join(lines) + b"\n")
    with Session.open(path) as session:
        open_ids = ["r1:ptc:1", "r1:ptc:2", "r1:ptc:4", "r1:ptc:5", "r1:ptc:6"]
        assert session.pending_sub_calls() == open_ids
        assert session.pending_calls() == ["r1"]
        appended = session.repair()
        assert [e["type"] for e in appended] == ["tool/ptc-dispatch"] * 5 + ["tool/result"]
        for event, sub_call_id in zip(appended[:5], open_ids, strict=True):
            assert event == {
                "type": "tool/ptc-dispatch",
                "root_call_id": "r1",
                "parent_call_id": "r1",
                "sub_call_id": sub_call_id,
                "name": "read",
                "is_error": True,
                "content": [{"type": "text", "text": "Error: " + REPAIR_MESSAGE}],
                "error": {
                    "message": REPAIR_MESSAGE,
                    "info": {"name": REPAIR_ERROR_NAME, "code": REPAIR_ERROR_CODE, "reason": None},
                },
                "meta": None,
            }
        assert session.pending_sub_calls() == [] and session.repair() == []
    with Session.open(path) as reopened:
        assert reopened.pending_sub_calls() == [] and reopened.pending_calls() == []
        nested = reopened.results_by_call(ptc=True)
        assert sorted(nested) == sorted([*open_ids, "r1:ptc:3"])
        assert all(nested[i].is_error for i in open_ids) and not nested["r1:ptc:3"].is_error


def test_a_sub_call_start_appended_live_is_tracked_and_settled_by_its_dispatch_event() -> None:
    session = Session()
    session.append(ptc_dispatch_start_event("r1", None, "r1:ptc:1", "read", {}))
    session.append(ptc_dispatch_start_event("r1", None, "r1:ptc:2", "read", {}))
    session.append(ptc_dispatch_event("r1", None, "r1:ptc:1", "read", False, [TextBlock("x")], None, None))
    assert session.pending_sub_calls() == ["r1:ptc:2"]
    (event,) = session.repair()
    assert (event["sub_call_id"], event["parent_call_id"], event["is_error"]) == ("r1:ptc:2", None, True)


def test_a_sub_call_start_with_odd_fields_is_still_settled_by_repair() -> None:
    session = Session()
    session.append({"type": "tool/ptc-dispatch-start", "sub_call_id": "s1", "name": 3})
    session.append({"type": "tool/ptc-dispatch-start", "name": "no sub_call_id: nothing to pair"})
    (event,) = session.repair()
    assert event["sub_call_id"] == "s1" and event["root_call_id"] is None and event["name"] is None


def test_a_thousand_events_hold_at_most_a_few_hundred_bytes_each() -> None:
    # orjson's output buffers have room to spare (about 4 KB for this
    # 100-byte event); the session keeps exact-size copies.
    import tracemalloc

    session = Session()
    event = call_event(1, 1, "c1", "echo", {"message": "hello there"})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            session.append(event)
        held = (tracemalloc.get_traced_memory()[0] - before) / 1000
    finally:
        tracemalloc.stop()
    assert held < 400, f"{held:.0f} bytes held per event of {len(session._lines[0])} bytes of JSON"


def test_repair_on_a_closed_session_with_pending_calls_raises() -> None:
    session = Session()
    session.append(call_event(1, 1, "c1", "t", {}))
    session.close()
    with pytest.raises(OSError, match="session is closed"):
        session.repair()
    assert session.pending_calls() == ["c1"]


# --------------------------------------------------------------------------
# Replay
# --------------------------------------------------------------------------


def test_logged_results_rebuild_what_present_result_needs(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    live_ok = ToolExecutionSuccess(
        value={"canonical": True},
        content=(TextBlock("t"), ImageBlock("aGk=", "image/png"), ReasoningBlock("r", "sig")),
        meta=materialize({"rows": [1, 2]}),  # the registry freezes live results
    )
    live_bad = failed("nope", ToolErrorInfo("ToolFailedError", "TOOL_FAILED", "why"))
    with Session(path) as session:
        session.append(call_event(1, 1, "c1", "t", {}))
        session.append(result_event("c1", live_ok))
        session.append(call_event(1, 1, "c2", "t", {}))
        session.append(result_event("c2", live_bad))
    with Session.open(path) as replay:
        logged = replay.results_by_call()
    assert list(logged) == ["c1", "c2"]
    first, second = logged["c1"], logged["c2"]
    assert first == LoggedResult("c1", live_ok.content, False, None, materialize({"rows": [1, 2]}))
    assert first.projection() == ToolResultProjection.of(live_ok)
    assert second.projection() == ToolResultProjection.of(live_bad)
    assert generic_result_view(second.projection()).content == live_bad.content
    # A logged result can be logged again, identically.
    assert orjson.loads(orjson.dumps(result_event("c1", first))) == replay.events()[1]


def test_results_by_call_keeps_an_id_s_latest_result_and_step_calls_pairs_each_step_s() -> None:
    """A provider that numbers its call ids per step reuses call_0: the map
    by id keeps the latest result (as documented); a step's own results
    are read with step_calls."""
    session = Session()
    for step in (1, 2):
        session.append(call_event(1, step, "call_0", "t", {}, agent="a"))
        session.append(result_event("call_0", ok(None, f"step {step}"), turn=1, step=step, agent="a"))
    assert {k: v.content for k, v in session.results_by_call().items()} == {"call_0": (TextBlock("step 2"),)}
    for step in (1, 2):
        (call,) = session.step_calls(1, step, "a")
        assert call.result is not None and call.result.content == (TextBlock(f"step {step}"),)


def test_results_by_call_reads_ptc_dispatches_when_asked() -> None:
    events = [
        ptc_dispatch_start_event("r1", "r1", "r1:ptc:1", "read", {}),
        ptc_dispatch_event("r1", "r1", "r1:ptc:1", "read", False, [TextBlock("x")], None, {"m": 1}),
        result_event("r1", ok(None, "done")),
    ]
    assert list(results_by_call(events)) == ["r1"]
    nested = results_by_call(events, ptc=True)
    assert list(nested) == ["r1:ptc:1"]
    assert nested["r1:ptc:1"].content == (TextBlock("x"),) and nested["r1:ptc:1"].meta == {"m": 1}


def test_a_malformed_result_event_is_reported_with_the_bad_field() -> None:
    event = result_event("c1", ok(None, "x"))
    event["content"] = [{"type": "text", "text": 5}]
    with pytest.raises(LosslessJsonError, match=r"event\.content\[0\]\.text"):
        LoggedResult.from_event(event)
    event = result_event("c1", failed("x"))
    event["error"] = {"message": "x", "info": {"name": "N"}}
    with pytest.raises(LosslessJsonError, match=r"event\.error\.info\.code"):
        LoggedResult.from_event(event)
    with pytest.raises(ValueError, match="not a tool/result"):
        LoggedResult.from_event({"type": "tool/call"})


# ---------------------------------------------------------------------------
# One writer per log (an flock the OS releases when its process dies;
# tests/recovery/test_one_writer.py has the trials across processes)
# ---------------------------------------------------------------------------


def test_a_second_session_on_a_log_someone_writes_reads_it_but_may_not_write_to_it(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    writer = Session(path)
    writer.append(call_event(1, 1, "c1", "t", {}))
    reader = Session.open(path)
    assert [e["call_id"] for e in reader.events()] == ["c1"] and not reader.held
    with pytest.raises(InvalidStateError, match=r"is being written by another Session .* one writer at a time"):
        reader.append(call_event(1, 1, "c2", "t", {}))
    with pytest.raises(InvalidStateError, match="is being written by another Session"):
        reader.repair()
    assert len(reader) == 1 and reader.pending_calls() == ["c1"]
    writer.append(call_event(1, 1, "c3", "t", {}))
    writer.close()
    # The writer is gone, but it wrote after the reader read: stale.
    with pytest.raises(InvalidStateError, match=r"changed after this Session read it \(\d+ bytes then, \d+ now"):
        reader.hold()
    reader.close()
    with Session.open(path) as again:
        again.hold()
        assert again.held
        assert [e["call_id"] for e in again.repair()] == ["c1", "c3"]
    assert not again.held


def test_a_new_log_is_held_from_its_creation(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with Session(path) as first:
        assert first.held
        with Session.open(path) as second, pytest.raises(InvalidStateError, match="by another Session"):
            second.hold()
    with pytest.raises(OSError, match="session is closed"):
        first.hold()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Session(fsync="yes"), "Session(fsync=...) is True or False, not 'yes'"),
        (lambda: Session(5), "Session(path) is a str or an os.PathLike or None (in memory), not int"),
        (lambda: Session.open(5), "Session.open(path) is a str or an os.PathLike, not int"),
        (lambda: Session.open(None), "Session.open(path) is a str or an os.PathLike, not NoneType"),
    ],
)
def test_a_session_option_of_the_wrong_type_is_refused_naming_it(make: Any, message: str) -> None:
    # Before, fsync="yes" was taken as True and a path of 5 failed in os.
    with pytest.raises(TypeError) as raised:
        make()
    assert str(raised.value) == message


def test_a_copied_tool_call_line_of_an_agents_batch_is_not_a_second_pending_call(tmp_path: Path) -> None:
    # An agent's batch logs each id once a run of its step: a second
    # tool/call of that id in the same run is a copy of the line (as
    # read_step and recovery have it). Before, it stayed pending until a
    # repair, after its call's result.
    from dsh_actors.session import batch_event

    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        session.append(batch_event(1, 1, [("c0", "t", {})], agent="a"))
        call = call_event(1, 1, "c0", "t", {}, agent="a")
        session.append(call)
        session.append(call)
        assert session.pending_calls() == ["c0"]
        session.append(result_event("c0", ok(1, "one"), turn=1, step=1, agent="a"))
        assert session.pending_calls() == [] and session.repair() == []
        session.append(call)  # a copy after its call's result: still a copy
        assert session.pending_calls() == [] and session.repair() == []
        # The step run again (a second tool/batch): its call is a new one.
        session.append(batch_event(1, 1, [("c0", "t", {})], agent="a"))
        session.append(call)
        assert session.pending_calls() == ["c0"]
    with Session.open(path) as reopened:  # read back the same way
        assert reopened.pending_calls() == ["c0"]
        assert reopened.read_step(1, 1, "a").calls[0].call_id == "c0"


@pytest.mark.parametrize("settled", [True, False])
def test_a_copied_tool_call_line_of_an_older_step_is_no_call_for_the_session_as_for_read_step(
    tmp_path: Path, settled: bool
) -> None:
    # A copy of step 1's tool/call line logged after the agent's next
    # batch (step 2's). Before, the session kept only the agent's latest
    # run, so the copy was a pending call of step 1 (repair() closed it, and
    # running step 1 again was refused) where read_step had it a copy: step
    # 1 settled. With its call still open (awaiting its approval), the
    # result then closed the copy and left the call awaiting.
    from dsh_actors.session import batch_event

    path = tmp_path / "log.jsonl"
    call = call_event(1, 1, "c0", "t", {}, agent="a")
    result = result_event("c0", ok(1, "one"), turn=1, step=1, agent="a")
    with Session(path) as session:
        session.append(batch_event(1, 1, [("c0", "t", {})], agent="a"))
        session.append(call)
        session.append(approval_request_event("c0", "s1", "t", "why", None, turn=1, step=1, agent="a"))
        if settled:
            session.decide("s1", {"c0": "allowed-once"})
            session.append(result)
        session.append(batch_event(1, 2, [("c1", "t", {})], agent="a"))  # the agent's next batch
        session.append(call_event(1, 2, "c1", "t", {}, agent="a"))
        session.append(call)  # the copy
        if not settled:
            session.decide("s1", {"c0": "allowed-once"})
            session.append(result)
        session.append(result_event("c1", ok(2, "two"), turn=1, step=2, agent="a"))
        with Session.open(path) as reopened:
            for read in (session, reopened):  # (as logged, and as read back)
                assert read.pending_calls() == [] and read.awaiting_approval() == [] and read.call_count == 2
                assert read.open_calls(1, 1, "a") == []
                (step1,) = read.read_step(1, 1, "a").calls
                assert (step1.state, step1.decision) == ("settled", "allowed-once")
                assert read.read_step(1, 1, "a") == read_step(read.events(), 1, 1, "a")
        assert session.repair() == []


def test_a_tool_call_of_another_agent_or_with_no_agent_or_batch_is_its_own_call() -> None:
    from dsh_actors.session import batch_event

    session = Session()
    session.append(batch_event(1, 1, [("c0", "t", {})], agent="a"))
    session.append(call_event(1, 1, "c0", "t", {}, agent="a"))
    session.append(call_event(1, 1, "c0", "t", {}, agent="b"))  # another agent's call of the same id
    session.append(call_event(2, 1, "c1", "t", {}))  # no agent named: old logs, each tool/call a call
    session.append(call_event(2, 1, "c1", "t", {}))
    assert session.pending_calls() == ["c0", "c0", "c1", "c1"]


def test_a_request_of_another_step_is_that_step_s_call_s_not_the_one_deferred_again_meanwhile() -> None:
    # (Step 2's request was taken for step 1's c0, deferred again and not
    # asked yet: step 2's suspension awaited nothing, and step 1's new
    # request replaced it. A step's read, which reads that step's events
    # only, says the same as a read of every event.)
    session = Session()
    session.append(call_event(1, 1, "c0", "t", {}, agent="a"))
    session.append(approval_request_event("c0", "s1", "t", "why", None, turn=1, step=1, agent="a"))
    session.decide("s1", {"c0": "deferred"})  # a resume of step 1 defers its c0 again ...
    session.append(call_event(1, 2, "c0", "t", {}, agent="a"))  # ... while step 2 defers its own c0
    session.append(approval_request_event("c0", "s2", "t", "why", None, turn=1, step=2, agent="a"))
    session.append(approval_request_event("c0", "s3", "t", "why", None, turn=1, step=1, agent="a"))  # (step 1's)
    assert session.awaiting_approval() == [("c0", "s2"), ("c0", "s3")]
    events = session.events()
    for calls in (session.step_calls, lambda turn, step, agent: read_step(events, turn, step, agent).calls):
        assert [(c.awaiting, c.decision) for c in calls(1, 1, "a")] == [("s3", "deferred")]
        assert [(c.awaiting, c.decision) for c in calls(1, 2, "a")] == [("s2", None)]
    session.decide("s2", {"c0": "allowed-once"})
    session.decide("s3", {"c0": "rejected"})
    assert session.awaiting_approval() == []


def test_a_call_settled_after_a_deferred_decision_leaves_nothing_behind(tmp_path: Path) -> None:
    # A resume that defers a call again and halts before asking (or a
    # repair) settles it without the request that decision waits for.
    # Before, the session kept the "deferred again" entry of each such call
    # for good: memory grew with every one, however short its steps.
    import gc
    import tracemalloc

    from dsh_actors.session import INTERRUPTED

    def step(i: int) -> list[dict[str, Any]]:
        return [
            call_event(1, i, f"call-{i:06d}", "refund", {}, agent="a"),
            approval_request_event(f"call-{i:06d}", f"s{i}", "refund", "why", None, turn=1, step=i, agent="a"),
        ]

    with Session(tmp_path / "log.jsonl") as session:
        for event in step(0):  # (the first steps allocate what every later one reuses)
            session.append(event)
        session.decide("s0", {"call-000000": "deferred"})
        session.append(result_event("call-000000", INTERRUPTED, turn=1, step=0, agent="a"))
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(1, 2_001):
                for event in step(i):
                    session.append(event)
                session.decide(f"s{i}", {f"call-{i:06d}": "deferred"})
                session.append(result_event(f"call-{i:06d}", INTERRUPTED, turn=1, step=i, agent="a"))
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert session.pending_calls() == [] and session.awaiting_approval() == []
        assert held < 32 * 1024, held
        # A new call of a settled one's id and step is paired as any call.
        session.append(call_event(1, 7, "call-000007", "refund", {}, agent="a"))
        session.append(approval_request_event("call-000007", "t7", "refund", "why", None, turn=1, step=7, agent="a"))
        assert session.awaiting_approval() == [("call-000007", "t7")]


def test_a_request_after_a_deferred_call_settled_is_the_open_calls_in_read_step_as_in_the_session() -> None:
    # A log whose requests and results name no step (written before they
    # carried it): c0 deferred again, then settled without a new request;
    # c0 logged again and asked. Before, read_step paired the request with
    # the settled call (its "deferred" entry was kept): the open c0 awaited
    # nothing there, and suspension s2 in the session.
    from dsh_actors.session import INTERRUPTED

    def request(suspension: str) -> dict[str, Any]:
        event = approval_request_event("c0", suspension, "t", "why", None)
        assert "turn" not in event
        return event

    session = Session()
    session.append(call_event(1, 1, "c0", "t", {}))
    session.append(request("s1"))
    session.decide("s1", {"c0": "deferred"})
    session.append(result_event("c0", INTERRUPTED))
    session.append(call_event(1, 1, "c0", "t", {}))
    session.append(request("s2"))
    assert session.awaiting_approval() == [("c0", "s2")]
    for calls in (session.step_calls(1, 1), read_step(session.events(), 1, 1).calls):
        assert [(c.state, c.awaiting) for c in calls] == [("unstarted", "s2")]


def test_a_request_after_a_deferred_call_settled_by_a_result_naming_no_agent_is_the_open_calls() -> None:
    # The call and its requests name agent "a", the result that settles it
    # after a "deferred" decision names none. Before, read_step dropped the
    # deferred entry by the result's agent (the session by the call's): it
    # kept it and paired the next request with the settled call, so the
    # open c0 awaited nothing there and s2 in the session.
    from dsh_actors.session import INTERRUPTED

    session = Session()
    session.append(call_event(1, 1, "c0", "t", {}, agent="a"))
    session.append(approval_request_event("c0", "s1", "t", "why", None, turn=1, step=1, agent="a"))
    session.decide("s1", {"c0": "deferred"})
    session.append(result_event("c0", INTERRUPTED))
    session.append(call_event(1, 1, "c0", "t", {}, agent="a"))
    session.append(approval_request_event("c0", "s2", "t", "why", None, turn=1, step=1, agent="a"))
    assert session.awaiting_approval() == [("c0", "s2")]
    assert [(c.state, c.awaiting) for c in read_step(session.events(), 1, 1, "a").calls] == [("unstarted", "s2")]


def test_an_in_memory_session_that_keeps_no_events_pairs_calls_and_refuses_reads() -> None:
    # (What replay feeds a log of any length: it holds what is open, as a
    # session on a file does, not every line.)
    session = Session(keep_events=False)
    for i in range(3):
        session.append(call_event(1, 1, f"c{i}", "echo", {}))
    session.append(result_event("c1", ok("ok"), turn=1, step=1))
    assert (len(session), session.pending_calls()) == (4, ["c0", "c2"])
    for read in (session.events, lambda: session.read_step(1, 1)):
        with pytest.raises(InvalidStateError, match=r"keeps no events \(Session\(keep_events=False\)\)"):
            read()
    with pytest.raises(InvalidTypeError, match=r"Session\(keep_events=...\) is True or False"):
        Session(keep_events=0)  # type: ignore[arg-type]


def test_a_request_taking_over_another_calls_suspension_and_id_keeps_the_index_consistent() -> None:
    # Two requests of one suspension and call id, for two calls (one names
    # its step and agent, one names neither): the second took the key over
    # while the first call still held it, and the first call's result then
    # dropped the second's, whose own result raised KeyError (replay showed
    # "internal error"; a generated-log comparison found it).
    session = Session()
    events: list[dict[str, Any]] = [
        {"type": "tool/call", "turn": 1, "step": 1, "call_id": "c", "name": "t", "arguments": {"w": 6}},
        {"type": "tool/call", "turn": 1, "step": 2, "call_id": "c", "name": "t", "arguments": {"w": 8}, "agent": "y"},
        approval_request_event("c", "s2", "t", "why", None, turn=1, step=1, agent="y"),
        approval_request_event("c", "s2", "t", "why", None),
        {"type": "tool/approval", "call_id": "c", "suspension": "s2", "decision": "allowed-once"},
        result_event("c", ok("r4"), turn=1, step=1),
        result_event("c", ok("r5"), turn=1, step=2, agent="y"),
    ]
    for event in events:
        session.append(event)
    assert (session.pending_calls(), session.awaiting_approval()) == ([], [])
