"""One writer per session log, across processes: a recovery beside the
original batch still running in another process, or beside another
process's recovery, is refused at once and runs nothing; the lock of a
process killed with SIGKILL dies with it. Real processes
(``writer_child.py``), synchronised on their stdout and stdin lines:
nothing sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_actors import Agent, Session, ToolRuntime
from dsh_actors.errors import InvalidStateError

from .writer_child import shop_tools

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("writer_child.py")
GUARD = 30.0  # seconds: a deadlock guard for every wait; a correct run never reaches it


class Child:
    """A ``writer_child.py`` process: its JSON lines out, a go line in."""

    def __init__(self, op: str, log: Path, effects: Path, block: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), op, str(log), str(effects), block],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=env,
            text=True,
        )

    def next(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # (the global pytest timeout guards it)
        assert line, f"the child ended (status {self.proc.wait(GUARD)})"
        message: dict[str, Any] = json.loads(line)
        return message

    def go(self) -> dict[str, Any]:
        """Let the blocked body return; the child's last report."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        report = self.next()
        self.end(0)
        return report

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL
        self.end(-9)

    def end(self, status: int) -> None:
        assert self.proc.wait(GUARD) == status
        for stream in (self.proc.stdin, self.proc.stdout):
            assert stream is not None
            stream.close()


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[tuple[ToolRuntime, Path, Path]]:
    """A runtime of this process with the children's tools, the log and the
    side-effect file."""
    effects = tmp_path / "effects.txt"
    with ToolRuntime() as rt:
        for definition in shop_tools(str(effects), block=""):
            rt.tools.register(definition)
        yield rt, tmp_path / "log.jsonl", effects


def effects_of(path: Path) -> Counter[str]:
    return Counter(path.read_text().split()) if path.exists() else Counter()


def recover_here(rt: ToolRuntime, session: Session) -> list[list[str]]:
    result = rt.tools.recover(Agent("shop", session=session), 1, 1)
    return [[item.call_id, item.result.content[0].text] for item in result.results]  # type: ignore[union-attr]


def test_a_recovery_beside_the_original_batch_still_running_in_another_process_is_refused(
    shop: tuple[ToolRuntime, Path, Path],
) -> None:
    rt, log, effects = shop
    original = Child("run", log, effects, block="c0")
    assert original.next() == {"running": "c0"}  # c0 runs, c1 waits for it

    early = Session.open(log)  # reading is fine while it writes
    assert [call.state for call in early.step_calls(1, 1)] == ["started", "unstarted"]
    with pytest.raises(InvalidStateError, match=r"is being written by another Session \(in this process, or in"):
        recover_here(rt, early)
    assert effects_of(effects) == Counter(["c0"])  # nothing ran here
    assert early.pending_calls() == ["c0"] and len(early) == 3  # and nothing was written

    assert original.go() == {"results": [["c0", "charge c0"], ["c1", "lookup c1"]]}
    # What this session read is stale now: it refuses rather than act on it.
    with pytest.raises(InvalidStateError, match=r"changed after this Session read it .*open it again"):
        recover_here(rt, early)
    early.close()
    with Session.open(log) as fresh:
        assert recover_here(rt, fresh) == [["c0", "charge c0"], ["c1", "lookup c1"]]  # complete: as logged
    assert effects_of(effects) == Counter(["c0", "c1"])


def test_two_recoveries_in_two_processes_are_kept_apart_and_a_killed_process_s_lock_dies_with_it(
    shop: tuple[ToolRuntime, Path, Path],
) -> None:
    rt, log, effects = shop
    original = Child("run", log, effects, block="c0")
    assert original.next() == {"running": "c0"}
    original.kill()  # SIGKILL in c0's body: its lock goes with it

    recovering = Child("recover", log, effects, block="c1")
    assert recovering.next() == {"running": "c1"}  # c0 ends INTERRUPTED, c1 runs
    with Session.open(log) as beside, pytest.raises(InvalidStateError, match=r"is being written by another Session"):
        recover_here(rt, beside)
    assert effects_of(effects) == Counter(["c0", "c1"])

    assert recovering.go() == {
        "results": [
            ["c0", "Error: tool call interrupted: the session ended before its result was recorded"],
            ["c1", "lookup c1"],
        ]
    }
    with Session.open(log) as after:
        assert [row[0] for row in recover_here(rt, after)] == ["c0", "c1"]  # complete: nothing runs
        assert after.pending_calls() == []
    assert effects_of(effects) == Counter(["c0", "c1"])  # each body ran once
