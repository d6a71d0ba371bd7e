"""The example ACP agent driven as an editor drives it: the SDK's client
side over stdio to ``python -m examples.acp_agent`` in a subprocess.

Tools that must still be running when the test acts (cancel, disconnect,
malformed input mid-batch) run ``echo up > up.fifo; cat gate.fifo``: the
shell tells the test it runs through one named pipe and blocks on another
that the test controls; the test waits for that and for the call's
``in_progress`` update (never for time) before acting.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("acp", reason="the acp extra is part of the test extra")
sys.path.insert(0, str(Path(__file__).parent))

from acp import RequestError
from harness import BOUND, REPO, Fifo, RecordingClient, Running, agent_process, call, run

pytestmark = pytest.mark.slow

GATE = "gate.fifo"


def _results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["call_id"]: e for e in events if e["type"] == "tool/result"}


def _assert_log_complete(events: list[dict[str, Any]]) -> None:
    calls = [e["call_id"] for e in events if e["type"] == "tool/call"]
    results = [e["call_id"] for e in events if e["type"] == "tool/result"]
    assert calls and sorted(calls) == sorted(results), events


def _raw_output(event: dict[str, Any]) -> dict[str, Any]:
    return {key: event[key] for key in ("is_error", "content", "error", "meta")}


def test_each_card_kind_appears_pending_moves_in_progress_and_ends_with_its_card(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with agent_process(tmp_path) as agent:
            (agent.root / "notes.txt").write_text("TODO: tests\nplain line\nTODO: docs\n")
            (agent.root / "old.txt").write_text("before\n")
            prompt = "\n".join(
                [
                    call("read_file", path="notes.txt"),
                    call("search_text", pattern="TODO"),
                    call("run_shell", command="echo hello"),
                    call("write_file", path="scratch/new.txt", content="fresh\n"),
                    call("write_file", path="scratch/../scratch/old.txt", content="x\n"),
                    "no_such_tool {}",
                    "this line is prose, not a call",
                ]
            )
            response = await agent.prompt(prompt)
            assert response.stop_reason == "end_turn"
            client = agent.client
            root = str(agent.root)

            # Every call: tool_call (pending), in_progress, then its end; all before the answer.
            for n, end in enumerate(["completed"] * 4 + ["completed", "failed"], 1):
                assert client.statuses(f"call_1_{n}") == [
                    ("tool_call", "pending"),
                    ("tool_call_update", "in_progress"),
                    ("tool_call_update", end),
                ], n
            assert client.messages()[-1].startswith("Ran 6 tool call(s): 5 ok, 1 failed.")

            read, search, shell, create, _, unknown = (client.tool_updates(f"call_1_{n}") for n in range(1, 7))
            # read: a generic call card (kind, absolute location), its window as text
            assert read[0]["title"] == "read notes.txt" and read[0]["kind"] == "read"
            assert read[0]["locations"] == [{"path": f"{root}/notes.txt"}]
            assert read[2]["content"] == [
                {
                    "type": "content",
                    "content": {"type": "text", "text": "```text\nTODO: tests\nplain line\nTODO: docs\n```"},
                }
            ]
            # search: its matches as text rows
            assert search[0]["kind"] == "search"
            assert search[2]["title"] == "search 'TODO'"
            assert search[2]["content"][0]["content"]["text"] == "notes.txt:1: TODO: tests\nnotes.txt:3: TODO: docs"
            # terminal: the command as title, kind execute, the arguments as raw input; output and exit code
            assert shell[0]["title"] == "echo hello" and shell[0]["kind"] == "execute"
            assert shell[0]["rawInput"] == {"command": "echo hello"}
            assert shell[2]["content"][0]["content"]["text"] == "```\nhello\n```\nexit code 0"
            # diff: ACP diff content (a new file has no oldText)
            assert create[0]["kind"] == "edit"
            assert create[2]["content"] == [{"type": "diff", "path": f"{root}/scratch/new.txt", "newText": "fresh\n"}]
            # generic: an unknown tool's failure as its raw content
            assert unknown[0]["title"] == "no_such_tool" and unknown[0]["kind"] == "other"
            assert unknown[2]["content"][0]["content"]["text"] == 'Error: unknown tool "no_such_tool"'

            # The raw output is the durable content: what the session log holds.
            logged = _results(agent.log_events())
            for n in range(1, 7):
                assert client.tool_updates(f"call_1_{n}")[-1]["rawOutput"] == _raw_output(logged[f"call_1_{n}"])

    run(scenario)


def test_escape_sequences_in_a_commands_output_are_left_out_of_its_card_not_its_result(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with agent_process(tmp_path) as agent:
            # Colour, a window title (OSC ended by BEL), a hyperlink (OSC ended by ST) and a stray control.
            command = (
                r"printf '\033[1;31mred\033[0m \033]0;pwned\007\033]8;;https://x.org\033\\link\033]8;;\033\\ \001\n'"
            )
            await agent.prompt(call("run_shell", command=command))
            end = agent.client.tool_updates("call_1_1")[-1]
            assert end["status"] == "completed"
            assert end["content"][0]["content"]["text"] == "```\nred link \\x01\n```\nexit code 0"
            # The model's result (and the raw output, its durable projection) is what the command wrote.
            painted = "\x1b[1;31mred\x1b[0m \x1b]0;pwned\x07\x1b]8;;https://x.org\x1b\\link\x1b]8;;\x1b\\ \x01"
            logged = _results(agent.log_events())["call_1_1"]
            assert logged["content"] == [{"type": "text", "text": f"{painted}\n[exit code 0]"}]
            assert end["rawOutput"] == _raw_output(logged)

    run(scenario)


def test_an_overwrite_shows_old_and_new_text_and_a_second_prompt_gets_new_call_ids(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with agent_process(tmp_path) as agent:
            (agent.root / "scratch" / "a.txt").write_text("one\n")
            await agent.prompt(call("write_file", path="scratch/a.txt", content="two\n"))
            await agent.prompt(call("read_file", path="scratch/a.txt"))
            end = agent.client.tool_updates("call_1_1")[-1]
            assert end["content"] == [
                {"type": "diff", "path": f"{agent.root}/scratch/a.txt", "oldText": "one\n", "newText": "two\n"}
            ]
            assert agent.client.status_of("call_2_1") == "completed"

    run(scenario)


@pytest.mark.parametrize(
    ("choice", "first", "asked_again", "second"),
    [
        ("allow-once", "completed", True, "completed"),
        ("allow-always", "completed", False, "completed"),
        ("reject-once", "failed", True, "completed"),
        ("reject-always", "failed", False, "failed"),
        ("cancelled", "failed", True, "completed"),
    ],
)
def test_a_write_outside_scratch_asks_with_four_options_and_each_answer_holds(
    tmp_path: Path, choice: str, first: str, asked_again: bool, second: str
) -> None:
    async def scenario() -> None:
        # The second prompt's question, if there is one, is allowed once.
        client = RecordingClient(choices=[choice, "allow-once"])
        async with agent_process(tmp_path, client=client) as agent:
            await agent.prompt(call("write_file", path="a.txt", content="1\n"))
            assert len(client.permissions) == 1
            tool_call, options = client.permissions[0]
            assert [(o.option_id, o.kind) for o in options] == [
                ("allow-once", "allow_once"),
                ("allow-always", "allow_always"),
                ("reject-once", "reject_once"),
                ("reject-always", "reject_always"),
            ]
            assert tool_call.tool_call_id == "call_1_1" and tool_call.title == "write a.txt"
            assert tool_call.content[0].content.text == "Allow writing a.txt (outside scratch/)?"
            # The call was shown (pending) before the question.
            assert client.statuses("call_1_1")[0] == ("tool_call", "pending")
            assert client.status_of("call_1_1") == first
            if first == "failed":
                expected = (
                    'approval for tool "write_file" was cancelled'
                    if choice == "cancelled"
                    else 'the user rejected tool "write_file"'
                )
                assert "in_progress" not in [s for _, s in client.statuses("call_1_1")]
                assert client.tool_updates("call_1_1")[-1]["rawOutput"]["error"]["message"] == expected
                assert not (agent.root / "a.txt").exists()

            # Another tool-wide question: remembered answers are per tool, whatever the arguments.
            await agent.prompt(call("write_file", path="b.txt", content="2\n"))
            assert len(client.permissions) == (2 if asked_again else 1)
            assert client.status_of("call_2_1") == second
            assert (agent.root / "b.txt").exists() == (second == "completed")

    run(scenario)


BLOCKING = "echo up > up.fifo; cat gate.fifo"
"""A shell command that says it runs, then waits for the test."""


async def _started(agent: Running, call_id: str, up: Fifo) -> None:
    """Wait until the call's shell runs (and its in_progress update came)."""
    assert await up.read() == "up\n"
    await agent.client.wait_for(lambda: agent.client.status_of(call_id) == "in_progress")


def test_session_cancel_in_the_middle_of_a_batch_aborts_it_and_the_turn_ends_cancelled(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with agent_process(tmp_path) as agent:
            up = Fifo(agent.root, "up.fifo")
            Fifo(agent.root, GATE)
            (agent.root / "notes.txt").write_text("x\n")
            prompt = "\n".join(
                [
                    call("read_file", path="notes.txt"),
                    call("run_shell", command=BLOCKING),  # exclusive: a barrier
                    call("write_file", path="scratch/after.txt", content="never\n"),
                ]
            )
            turn = agent.start_prompt(prompt)
            await _started(agent, "call_1_2", up)
            await agent.conn.cancel(session_id=agent.session_id)
            response = await asyncio.wait_for(turn, BOUND)
            assert response.stop_reason == "cancelled"
            client = agent.client
            assert client.status_of("call_1_1") == "completed"
            assert client.statuses("call_1_2")[-1] == ("tool_call_update", "failed")
            assert client.tool_updates("call_1_2")[-1]["rawOutput"]["error"]["message"] == "tool call aborted"
            # The call after the barrier never started: it appears and fails at once.
            assert client.statuses("call_1_3") == [("tool_call", "pending"), ("tool_call_update", "failed")]
            assert (
                client.tool_updates("call_1_3")[-1]["rawOutput"]["error"]["message"]
                == "tool call aborted before dispatch"
            )
            assert not (agent.root / "scratch" / "after.txt").exists()
            assert client.messages()[-1].startswith("Cancelled. Ran 3 tool call(s): 1 ok, 2 failed.")
            _assert_log_complete(agent.log_events())

            # The session goes on: the next turn runs.
            response = await agent.prompt(call("read_file", path="notes.txt"))
            assert response.stop_reason == "end_turn" and client.status_of("call_2_1") == "completed"

    run(scenario)


def test_session_cancel_while_a_permission_request_is_open_answers_it_cancelled(tmp_path: Path) -> None:
    class Undecided(RecordingClient):
        """Never answers by itself: the agent must give up on the request."""

        async def request_permission(self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any) -> Any:
            self.permissions.append((tool_call, options))
            await self._note()
            await asyncio.Event().wait()

    async def scenario() -> None:
        client = Undecided()
        async with agent_process(tmp_path, client=client) as agent:
            turn = agent.start_prompt(call("write_file", path="a.txt", content="1\n"))
            await client.wait_for(lambda: len(client.permissions) == 1)
            await agent.conn.cancel(session_id=agent.session_id)
            response = await asyncio.wait_for(turn, BOUND)
            assert response.stop_reason == "cancelled"
            message = client.tool_updates("call_1_1")[-1]["rawOutput"]["error"]["message"]
            assert message == 'approval for tool "write_file" was cancelled'
            assert not (agent.root / "a.txt").exists()

    run(scenario)


def test_a_permission_answer_that_is_no_answer_fails_the_call_naming_what_the_client_sent(tmp_path: Path) -> None:
    # An option that was not offered fails the approval (POLICY_FAILED,
    # saying so); so does a response whose error is not an object, at once
    # (the request it answers is failed, not left waiting for another).
    # One agent takes the three answers, a prompt each (one process: the
    # session goes on after each).
    class Holding(RecordingClient):
        """Answers from ``choices`` while it has some; then leaves the
        request open (the test answers with a raw line)."""

        async def request_permission(self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any) -> Any:
            if self.choices:
                return await super().request_permission(options, session_id, tool_call, **kwargs)
            self.permissions.append((tool_call, options))
            await self._note()
            await asyncio.Event().wait()

    async def scenario() -> None:
        client = Holding(choices=["allow-sometimes"])
        async with agent_process(tmp_path, client=client) as agent:
            response = await agent.prompt(call("write_file", path="a.txt", content="1\n"))
            assert response.stop_reason == "end_turn"
            error = client.tool_updates("call_1_1")[-1]["rawOutput"]["error"]
            assert error["info"]["code"] == "POLICY_FAILED"
            assert error["message"].startswith(
                "approval: the ACP client selected the option 'allow-sometimes', which was not offered (offered: "
            )
            assert not (agent.root / "a.txt").exists()
            # A response whose error is not an object; an allowing one without
            # "jsonrpc": "2.0" (it is not a JSON-RPC response: it allows nothing).
            allowing = b'{"outcome": {"outcome": "selected", "optionId": "allow-once"}}'
            for turn_number, (answer, problem) in enumerate(
                (
                    (b'{"jsonrpc": "2.0", "id": %d, "error": "nope"}\n', "a response's error must be an object"),
                    (b'{"id": %d, "result": ' + allowing + b"}\n", 'a JSON-RPC message has "jsonrpc": "2.0"'),
                ),
                start=2,
            ):
                turn = agent.start_prompt(call("write_file", path="a.txt", content="1\n"))
                await client.wait_for(lambda asked=turn_number: len(client.permissions) == asked)
                asked = [m for m in client.incoming if m.get("method") == "session/request_permission"][-1]
                await agent.send_raw(answer % asked["id"])
                response = await asyncio.wait_for(turn, BOUND)
                assert response.stop_reason == "end_turn"
                error = client.tool_updates(f"call_{turn_number}_1")[-1]["rawOutput"]["error"]
                assert error["message"] == (
                    f"approval: the ACP client answered the permission request with an error: {problem}"
                )
                assert not (agent.root / "a.txt").exists()

    run(scenario)


def test_what_a_client_s_bad_permission_answer_says_is_shown_printable_and_cut(tmp_path: Path) -> None:
    # The failure repeats what the client sent (an error's message, an
    # outcome tag that matches none): the model reads it and the session
    # log holds it, so escape sequences are shown as escapes and it is cut
    # to 200 characters (the client's message went in whole and raw).
    class Holding(RecordingClient):
        async def request_permission(self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any) -> Any:
            self.permissions.append((tool_call, options))
            await self._note()
            await asyncio.Event().wait()  # the test answers with a raw line

    said = "\x1b]0;owned\x07" + "m" * 300  # (10 characters, then 300)
    tag = "\x1b[2J" + "t" * 300  # (4 characters, then 300)
    answers: list[tuple[dict[str, Any], str]] = [
        (
            {"error": {"code": -32000, "message": said}},
            "approval: the ACP client answered the permission request with an error: "
            "\\x1b]0;owned\\x07" + "m" * 190 + "...",
        ),
        (
            {"result": {"outcome": {"outcome": tag}}},
            "approval: the ACP client's answer to the permission request is not valid "
            "(outcome: Input tag '\\x1b[2J" + "t" * 185 + "...)",
        ),
    ]

    async def scenario() -> None:
        holding = Holding()
        async with agent_process(tmp_path, client=holding) as agent:  # one agent, a prompt an answer
            for turn_number, (answer, message) in enumerate(answers, start=1):
                turn = agent.start_prompt(call("write_file", path="a.txt", content="1\n"))
                await holding.wait_for(lambda asked=turn_number: len(holding.permissions) == asked)
                asked = [m for m in holding.incoming if m.get("method") == "session/request_permission"][-1]
                await agent.send_raw(json.dumps({"jsonrpc": "2.0", "id": asked["id"], **answer}).encode() + b"\n")
                assert (await asyncio.wait_for(turn, BOUND)).stop_reason == "end_turn"
                call_id = f"call_{turn_number}_1"
                error = holding.tool_updates(call_id)[-1]["rawOutput"]["error"]
                assert error["info"]["code"] == "POLICY_FAILED"
                assert error["message"] == message
                assert _results(agent.log_events())[call_id]["error"]["message"] == message
                assert not (agent.root / "a.txt").exists()
        assert "\x1b" not in agent.stderr

    run(scenario)


def test_a_client_that_disconnects_mid_batch_leaves_the_agent_exiting_cleanly_with_a_complete_log(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with agent_process(tmp_path) as agent:
            up = Fifo(agent.root, "up.fifo")
            Fifo(agent.root, GATE)
            turn = agent.start_prompt(
                "\n".join([call("run_shell", command=BLOCKING), call("read_file", path="nowhere.txt")])
            )
            await _started(agent, "call_1_1", up)
            turn.cancel()
            # Leaving the block closes the client's end; the harness requires exit code 0.
        events = agent.log_events()
        _assert_log_complete(events)
        results = _results(events)
        assert results["call_1_1"]["error"]["message"] == "tool call aborted"
        assert results["call_1_2"]["error"]["message"] == "tool call aborted before dispatch"

    run(scenario)


def test_a_client_that_closes_stdin_and_stops_reading_stdout_leaves_the_agent_exiting(tmp_path: Path) -> None:
    # A raw client (the SDK's reads all the time): it never reads the
    # agent's stdout past session/new, so the updates of a big batch fill
    # the pipe and the agent's sends wait; then it closes stdin. The agent
    # waited for ever for a drain the SDK's stdio writer never ended.
    async def scenario() -> None:
        root = tmp_path / "project"
        root.mkdir()
        (root / "big.txt").write_text(("a line of the big file\n") * 50_000)
        up = Fifo(root, "up.fifo")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "examples.acp_agent",
            "--log-dir",
            str(tmp_path / "logs"),
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        stdin = process.stdin
        pidfd = os.pidfd_open(process.pid)
        exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def ended() -> None:
            if not exited.done():
                exited.set_result(None)

        asyncio.get_running_loop().add_reader(pidfd, ended)
        try:

            def send(method: str, ident: int, params: dict[str, Any]) -> None:
                message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
                stdin.write(json.dumps(message).encode() + b"\n")

            send("initialize", 0, {"protocolVersion": 1})
            send("session/new", 1, {"cwd": str(root), "mcpServers": []})
            await asyncio.wait_for(process.stdout.readline(), BOUND)
            session_id = json.loads(await asyncio.wait_for(process.stdout.readline(), BOUND))["result"]["sessionId"]
            # Twenty big reads, then (the shell runs alone, after them) a call
            # that tells the test the reads ended.
            calls = [call("read_file", path="big.txt")] * 20 + [call("run_shell", command="echo up > up.fifo")]
            prompt = [{"type": "text", "text": "\n".join(calls)}]
            send("session/prompt", 2, {"sessionId": session_id, "prompt": prompt})
            await stdin.drain()
            assert await up.read() == "up\n"
            stdin.close()
            try:
                await asyncio.wait_for(exited, BOUND)  # (no reading of stdout)
            except TimeoutError:
                raise AssertionError("the agent did not exit after its client closed stdin") from None
        finally:
            asyncio.get_running_loop().remove_reader(pidfd)
            os.close(pidfd)
            if not exited.done():
                process.kill()
            await process.stdout.read()
            stderr = (await process.stderr.read()).decode()
            await process.wait()
        assert process.returncode == 0, stderr
        events = [
            json.loads(line) for path in (tmp_path / "logs").glob("*.jsonl") for line in path.read_text().splitlines()
        ]
        _assert_log_complete(events)
        assert len(_results(events)) == 21

    run(scenario)


# (The code None: not answered. A malformed response is logged and fails
# the request it answers, if any: an answer to a response could start the
# peers answering each other's errors.)
MALFORMED: list[tuple[bytes, object, int | None]] = [
    (b"this is not json\n", None, -32700),
    (b"[1, 2, 3]\n", None, -32600),
    (b'{"jsonrpc": "2.0", "id": "m1", "method": 42}\n', "m1", -32600),
    (b'{"jsonrpc": "2.0", "id": "m2", "error": "a string"}\n', "m2", None),
    (b'{"jsonrpc": "2.0", "id": null, "result": 1, "error": {"code": 1, "message": "x"}}\n', None, None),
    (b'{"id": "m3", "method": "session/prompt"}\n', "m3", -32600),
    (b'{"jsonrpc": "2.0", "id": "m4", "method": "no/such/method"}\n', "m4", -32601),
    (b'{"jsonrpc": "2.0", "id": "m5", "method": "session/prompt", "params": {"sessionId": 5}}\n', "m5", -32602),
    (
        b'{"jsonrpc": "2.0", "id": "m6", "method": "session/prompt", "params": {"sessionId": "nope", "prompt": []}}\n',
        "m6",
        -32602,
    ),
    # A lone surrogate in a method name, which the error repeats: answered
    # (the surrogate sent as U+FFFD, which UTF-8 can carry).
    (b'{"jsonrpc": "2.0", "id": "m8", "method": "x\\ud800"}\n', "m8", -32601),
    # NaN is not JSON (Python's parser reads it): a parse error.
    (b'{"jsonrpc": "2.0", "id": "m9", "method": "session/prompt", "params": {"sessionId": NaN}}\n', None, -32700),
    # Nested deeper than Python's parser recurses: a parse error, not a crash.
    (
        b'{"jsonrpc": "2.0", "id": "m7", "method": "x", "params": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        None,
        -32700,
    ),
]


def test_malformed_messages_mid_batch_get_protocol_errors_and_lose_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with agent_process(tmp_path) as agent:
            up = Fifo(agent.root, "up.fifo")
            gate = Fifo(agent.root, GATE)
            turn = agent.start_prompt(call("run_shell", command=BLOCKING))
            client = agent.client
            await _started(agent, "call_1_1", up)
            for line, _, _ in MALFORMED:
                await agent.send_raw(line)

            def errors() -> list[tuple[object, int]]:
                return [(m.get("id"), m["error"]["code"]) for m in client.incoming if "error" in m]

            answered = [(i, c) for _, i, c in MALFORMED if c is not None]
            await client.wait_for(lambda: len(errors()) == len(answered))
            assert sorted(errors(), key=repr) == sorted(answered, key=repr)

            await gate.write("released\n")
            response = await asyncio.wait_for(turn, BOUND)
            assert response.stop_reason == "end_turn"
            end = client.tool_updates("call_1_1")[-1]
            assert end["status"] == "completed"
            assert end["content"][0]["content"]["text"] == "```\nreleased\n```\nexit code 0"
            _assert_log_complete(agent.log_events())
            # And the agent still serves.
            response = await agent.prompt(call("run_shell", command="echo still here"))
            assert response.stop_reason == "end_turn" and client.status_of("call_2_1") == "completed"

    run(scenario)


def test_ptc_sub_calls_appear_under_their_run_code_call(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with agent_process(tmp_path, "--ptc") as agent:
            (agent.root / "notes.txt").write_text("hello\n")
            code = "r = await tools.read_file(path='notes.txt')\nreturn r['total_lines']"
            response = await agent.prompt(call("run_code", code=code))
            assert response.stop_reason == "end_turn"
            client = agent.client
            sub = "call_1_1:ptc:1"
            assert client.statuses(sub) == [
                ("tool_call", "pending"),
                ("tool_call_update", "in_progress"),
                ("tool_call_update", "completed"),
            ]
            appeared = client.tool_updates(sub)[0]
            assert appeared["title"] == "run_code \u203a read notes.txt"
            assert appeared["_meta"] == {"dsh_actors": {"parentToolCallId": "call_1_1"}}
            # The sub-call shows while run_code runs: after it started, before it ended.
            order = [(u["toolCallId"], u.get("status")) for u in client.tool_updates()]
            assert order.index(("call_1_1", "in_progress")) < order.index((sub, "pending"))
            assert order.index((sub, "completed")) < order.index(("call_1_1", "completed"))
            end = client.tool_updates("call_1_1")[-1]
            assert end["rawOutput"]["is_error"] is False

    run(scenario)


def test_requests_the_agent_cannot_take_get_json_rpc_errors_and_no_traceback(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with agent_process(tmp_path) as agent:
            with pytest.raises(RequestError) as relative:
                await asyncio.wait_for(agent.conn.new_session(cwd=".", mcp_servers=[]), BOUND)
            assert relative.value.code == -32602
            assert relative.value.data == {"cwd": "'.' is not an absolute path (ACP requires one)"}
            with pytest.raises(RequestError) as unknown:
                await asyncio.wait_for(agent.conn.authenticate(method_id="password"), BOUND)
            assert unknown.value.code == -32602
            assert unknown.value.data == {
                "methodId": "unknown authentication method 'password': this agent needs no authentication"
            }
            # A notification is not answered: the SDK logs its invalid parameters (one line, below).
            await agent.send_raw(b'{"jsonrpc": "2.0", "method": "session/cancel", "params": {"x": 1}}\n')

            up = Fifo(agent.root, "up.fifo")
            gate = Fifo(agent.root, GATE)
            turn = agent.start_prompt(call("run_shell", command=BLOCKING))
            await _started(agent, "call_1_1", up)
            with pytest.raises(RequestError) as second:
                await agent.prompt(call("run_shell", command="echo never"))
            assert second.value.code == -32600
            assert second.value.data == {
                "sessionId": f"session {agent.session_id!r} is already running a prompt: wait for its answer or cancel it"
            }
            await gate.write("released\n")
            assert (await asyncio.wait_for(turn, BOUND)).stop_reason == "end_turn"
            # The refused prompt took no turn: the next one is turn 2.
            assert (await agent.prompt(call("run_shell", command="echo next"))).stop_reason == "end_turn"
            assert agent.client.status_of("call_2_1") == "completed"
            assert [e["turn"] for e in agent.log_events() if e["type"] == "tool/call"] == [1, 2]
        assert "Traceback" not in agent.stderr, agent.stderr
        logged = [line for line in agent.stderr.splitlines() if "session/cancel" in line]
        assert len(logged) == 1 and "ERROR" in logged[0], agent.stderr
        assert "Unhandled error while handling notification method=session/cancel: 1 validation error" in logged[0]

    run(scenario)
