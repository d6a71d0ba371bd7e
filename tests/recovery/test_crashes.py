"""Real crashes of the session log's writer: a child process killed with
SIGKILL while it writes (the test waits on the log's contents, never on a
clock), then the log read back in this process: ``Session.open``,
``dsh-actors replay``, ``rt.tools.recover``; and the writer's lock, which
a subprocess started meanwhile must not keep once its session closed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall, ToolRuntime
from dsh_actors.cli import main as cli_main
from dsh_actors.errors import InvalidValueError

REPO = Path(__file__).resolve().parents[2]
GUARD = 30.0  # seconds: a deadlock guard for every wait; a correct run never reaches it

# A child that logs one step whose tool/batch event is tens of megabytes (its
# arguments), so SIGKILL can land while that first event is being written.
FIRST_EVENT_CHILD = textwrap.dedent(
    """
    import sys
    from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall, ToolRuntime
    session = Session(sys.argv[1])
    calls = tuple(ToolCall(f"c{i}", "nope", {"blob": "z" * 16_000_000}) for i in range(4))
    with ToolRuntime() as rt:
        rt.tools.execute(ToolBatchInput(calls=calls, agent=Agent("a", session=session), log=LogStep(1, 1)))
    """
)


def kill_while_writing_the_first_event(log: Path) -> bytes:
    """Run the child until its log holds bytes (the first event's write has
    begun), kill it there; what the log holds. Retried while the kill came
    too late to cut the event (the whole line had been written)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(20):
        log.unlink(missing_ok=True)
        child = subprocess.Popen([sys.executable, "-c", FIRST_EVENT_CHILD, str(log)], cwd=REPO, env=env)
        try:
            while child.poll() is None:  # wait on the log's contents
                if log.exists() and log.stat().st_size > 0:
                    break
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(GUARD)
        data = log.read_bytes()
        if data and b"\n" not in data:
            return data
    pytest.fail("the child was never killed while its first event was being written")


def test_a_log_killed_while_its_first_event_was_written_replays_as_a_torn_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    torn = kill_while_writing_the_first_event(log)
    assert torn.startswith(b'{"type":"tool/batch"')
    with Session.open(log) as session:
        assert (session.torn_line, len(session), session.events()) == (1, 0, [])
    # replay reads it by the session's rules: a torn last line, ignored with
    # a note (it said the file was not a session log, and exited 1)
    capsys.readouterr()
    assert cli_main(["replay", str(log)]) == 0
    out, err = capsys.readouterr()
    assert out == "(no tool calls in the log)\n"
    assert err == f"dsh-actors replay: {log}:1: ignored a torn last line (an interrupted write)\n"
    assert log.read_bytes() == torn, "replay never changes the file"
    # The step never started: recover says to run it, and running it cuts
    # the torn line off.
    session = Session.open(log)
    with ToolRuntime() as rt:
        with pytest.raises(InvalidValueError, match="never started: run it"):
            rt.tools.recover(Agent("a", session=session), 1, 1)
        batch = ToolBatchInput(
            calls=(ToolCall("c0", "nope", "{}"),), agent=Agent("a", session=session), log=LogStep(1, 1)
        )
        assert rt.tools.execute(batch).results[0].result.is_error
    session.close()
    with Session.open(log) as again:
        assert again.torn_line is None and again.pending_calls() == []
        assert [e["type"] for e in again.events()] == ["tool/batch", "tool/call", "tool/result"]


def test_a_lone_line_of_other_text_is_still_no_session_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_bytes(b"some notes, not JSON")
    capsys.readouterr()
    assert cli_main(["replay", str(tmp_path / "notes.txt")]) == 1
    assert "not a session log (line 1 is not a session event)" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "win32", reason="no flock on Windows")
def test_a_closed_session_releases_the_log_though_a_subprocess_holds_a_copy_of_its_descriptor(tmp_path: Path) -> None:
    # A subprocess another thread starts while a session holds its log has
    # the log's descriptor from its fork until its exec closes it; here one
    # keeps it (pass_fds) until told to end.
    log = tmp_path / "log.jsonl"
    first = Session(log)
    first.append({"type": "note"})
    assert first.held
    assert first._file is not None
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        pass_fds=(first._file.fileno(),),
    )
    try:
        first.close()
        second = Session.open(log)
        try:
            second.hold()  # raised "is being written by another Session"
            second.append({"type": "note"})
            assert second.held
        finally:
            second.close()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(GUARD) == 0
    with Session.open(log) as third:
        assert [e["type"] for e in third.events()] == ["note", "note"]
