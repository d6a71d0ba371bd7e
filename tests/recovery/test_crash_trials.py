"""Crash trials with real processes: a child process runs a logged batch of
idempotent and non-idempotent tools whose bodies append to a side-effect
file; the test kills it with SIGKILL at every moment the log or a side
effect changes (25 moments: more than the issue's 20), and a new process
recovers the step with ``rt.tools.recover``. Then every call has exactly
one result, in model order, none is lost, no non-idempotent body ran
twice, and the log needs no ``repair()``.

``crash_child.py`` is the process side: one interpreter (started once per
test) forks a child per run, so a trial costs a fork, not an interpreter
start. The child announces each kill point on its stdout and blocks there;
the test kills it on that line: nothing sleeps.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_actors import Session
from dsh_actors.session import REPAIR_ERROR_CODE, LoggedCall

from .crash_child import CALLS, IDEMPOTENT

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("crash_child.py")
GUARD = 30.0  # seconds: a deadlock guard for every wait; a correct run never reaches it
MOMENTS = 25  # what one uninterrupted run reaches (checked)
IDS = [call_id for call_id, _ in CALLS]
TOOL = dict(CALLS)


class Zygote:
    """The child interpreter: commands in, JSON lines out (read by a thread
    into a queue, so every wait is bounded)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO, env=env
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.held: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, name="crash-trials-reader")
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        self.proc.stdin.flush()

    def expect(self, *keys: str) -> dict[str, Any]:
        """The next message that has one of ``keys`` (others wait their turn)."""
        for i, message in enumerate(self.held):
            if any(key in message for key in keys):
                return self.held.pop(i)
        while True:
            message = self.lines.get(timeout=GUARD)
            assert message is not None, "the child interpreter ended"
            assert "error" not in message, message["error"]
            if any(key in message for key in keys):
                return message
            self.held.append(message)

    def fork(self, **command: Any) -> tuple[int, dict[str, Any]]:
        """Run a command; its child's pid and its first report."""
        self.send(**command)
        pid = self.expect("pid")["pid"]
        return pid, self.expect("point", "done", "recovered")

    def reap(self, pid: int) -> int:
        self.send(op="reap", pid=pid)
        reaped = self.expect("reaped")
        assert reaped["reaped"] == pid
        return int(reaped["status"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(GUARD) == 0
        self.reader.join(GUARD)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    child = Zygote()
    try:
        yield child
    finally:
        child.close()


def crash(zygote: Zygote, op: str, log: Path, effects: Path, kill_at: int | None) -> dict[str, Any]:
    """Run ``op`` in a child; kill it with SIGKILL at moment ``kill_at``.
    Its report (``point``, ``done`` or ``recovered``)."""
    pid, report = zygote.fork(op=op, log=str(log), effects=str(effects), kill_at=kill_at)
    status = None
    if "point" in report:
        assert report["point"] == kill_at
        os.kill(pid, signal.SIGKILL)
        status = zygote.reap(pid)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    else:
        status = zygote.reap(pid)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, report
    return report


def effects_of(path: Path) -> Counter[str]:
    return Counter(path.read_text().split()) if path.exists() else Counter()


def logged_step(log: Path) -> dict[str, LoggedCall]:
    """The step as the log has it now (a read-only open changes nothing)."""
    with Session.open(log) as session:
        return {call.call_id: call for call in session.step_calls(1, 1)}


def check_recovered(log: Path, effects: Path, rows: list[list[Any]], before: dict[str, LoggedCall]) -> dict[str, str]:
    """Everything recovery promises, for one trial; how each call ended
    (``kept``, ``interrupted``, ``ran again``, ``ran``) for the coverage check."""
    with Session.open(log) as session:
        events = session.events()
        assert session.pending_calls() == [], "the log needs repair()"
        assert session.torn_line is None
        after = {call.call_id: call for call in session.step_calls(1, 1)}
    # Exactly one tool/call and one tool/result per call, results in model order.
    assert Counter(e["call_id"] for e in events if e["type"] == "tool/call") == Counter(IDS)
    assert [e["call_id"] for e in events if e["type"] == "tool/result"] == IDS
    assert [row[0] for row in rows] == IDS
    done = effects_of(effects)
    ended: dict[str, str] = {}
    for (call_id, is_error, code, text), call_id_again in zip(rows, IDS, strict=True):
        assert call_id == call_id_again
        name = TOOL[call_id]
        was = before.get(call_id)
        logged = after[call_id].result
        assert logged is not None and logged.is_error == is_error
        assert logged.content[0].text == text  # type: ignore[union-attr]
        assert done[call_id] <= 1 or name in IDEMPOTENT, f"{name} {call_id} ran {done[call_id]} times"
        if was is not None and was.result is not None:
            ended[call_id] = "kept"  # its logged result, unchanged
            assert logged == was.result
        elif is_error:
            # Only a non-idempotent call that had started may end INTERRUPTED.
            assert code == REPAIR_ERROR_CODE, (call_id, code, text)
            assert name not in IDEMPOTENT and was is not None and was.state == "started", (call_id, was)
            ended[call_id] = "interrupted"
        else:
            assert text == f"{name} {call_id}"
            assert done[call_id] >= 1, f"{call_id} succeeded without its side effect"
            ended[call_id] = "ran again" if was is not None and was.state == "started" else "ran"
        if not is_error:
            assert done[call_id] >= 1
    return ended


def test_an_uninterrupted_run_reaches_every_moment_and_recovering_it_changes_nothing(
    zygote: Zygote, tmp_path: Path
) -> None:
    log, effects = tmp_path / "log.jsonl", tmp_path / "effects.txt"
    assert crash(zygote, "run", log, effects, None) == {"done": MOMENTS}
    before = logged_step(log)
    size = log.stat().st_size
    report = crash(zygote, "recover", log, effects, None)
    assert check_recovered(log, effects, report["recovered"], before) == dict.fromkeys(IDS, "kept")
    assert log.stat().st_size == size  # a complete step: nothing written
    assert effects_of(effects) == Counter(IDS)


def test_a_child_killed_at_any_moment_is_recovered_by_a_new_process_exactly_once(
    zygote: Zygote, tmp_path: Path
) -> None:
    seen: Counter[str] = Counter()
    for kill_at in range(1, MOMENTS + 1):
        log, effects = tmp_path / f"log-{kill_at}.jsonl", tmp_path / f"effects-{kill_at}.txt"
        report = crash(zygote, "run", log, effects, kill_at)
        assert report["point"] == kill_at
        before = logged_step(log)
        effects_before = effects_of(effects)
        assert set(before) == set(IDS), "the tool/batch is the first event: no call is unknown"
        recovered = crash(zygote, "recover", log, effects, None)["recovered"]
        ended = check_recovered(log, effects, recovered, before)
        done = effects_of(effects)
        for call_id, how in ended.items():
            if how in ("kept", "interrupted"):
                assert done[call_id] == effects_before[call_id], f"{call_id} ran again ({how})"
            elif how == "ran":
                assert done[call_id] == effects_before[call_id] + 1, f"{call_id} did not run exactly once"
            seen[how] += 1
            if how == "interrupted":
                seen["interrupted after its effect" if effects_before[call_id] else "interrupted before it"] += 1
            if how == "ran" and not before[call_id].logged:
                seen["ran, never logged"] += 1
            if how == "ran" and before[call_id].logged:
                seen["ran, logged but not started"] += 1
    # The moments cover every way a call can stand when the process dies.
    for how in (
        "kept",
        "interrupted after its effect",
        "interrupted before it",
        "ran again",
        "ran, never logged",
        "ran, logged but not started",
    ):
        assert seen[how], f"no trial ended a call as {how!r}: {seen}"


@pytest.mark.parametrize(("kill_at", "kill_recovery_at"), [(3, 4), (8, 2), (12, 3), (18, 1)])
def test_a_recovery_killed_in_its_turn_is_recovered_by_the_next_process(
    zygote: Zygote, tmp_path: Path, kill_at: int, kill_recovery_at: int
) -> None:
    log, effects = tmp_path / "log.jsonl", tmp_path / "effects.txt"
    crash(zygote, "run", log, effects, kill_at)
    report = crash(zygote, "recover", log, effects, kill_recovery_at)
    assert report["point"] == kill_recovery_at
    before = logged_step(log)  # what the killed recovery left
    effects_before = effects_of(effects)
    recovered = crash(zygote, "recover", log, effects, None)["recovered"]
    ended = check_recovered(log, effects, recovered, before)
    done = effects_of(effects)
    for call_id, how in ended.items():
        if how != "ran again":
            assert done[call_id] == effects_before[call_id] + (how == "ran"), (call_id, how)
