"""What a demanding user hits at the edges of a run: failure messages a
program makes that the wire cannot carry as they are (a lone surrogate,
megabytes), a worker that breaks the protocol (a clear, short error, never
a Python repr of the parsed message), a call to a tool that is not bound
(listed as the failure the program got), and a worker that never becomes
ready (a timeout that says so, with its stderr)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from .helpers import code_of, echo_tool, install, run_code

READY = '{"t":"ready","v":1}'

FAKE_WORKER = """
import os, sys
for item in sys.argv[1:]:
    if item == "<read>":
        sys.stdin.buffer.readline()
    else:
        os.write(1, item.encode() + b"\\n")
sys.stdin.buffer.read()
"""
"""A worker that writes its arguments as protocol lines (``<read>``: wait
for one line from the parent first), then waits to be killed."""


def fake_worker(*lines: str) -> list[str]:
    return [sys.executable, "-c", FAKE_WORKER, *lines]


def failed_as(result: Any, kind: str) -> str:
    assert code_of(result) == "CODE_RUN_FAILED", result
    message: str = result.error.message
    assert message.startswith(f"code run failed ({kind}): "), message[:300]
    return message


def test_an_exception_message_with_a_lone_surrogate_fails_the_run_as_an_error(rt: Any) -> None:
    # (It crashed the worker as it wrote its done message: "crashed", with
    # the worker's own traceback as the program's output.)
    install(rt, timeout_ms=5000)
    message = failed_as(run_code(rt, "raise ValueError('bad \\ud800 text')"), "error")
    assert message.startswith("code run failed (error): ValueError: bad ? text\n"), message
    assert "worker.py" not in message


def test_a_dict_key_with_a_lone_surrogate_is_refused_in_arguments_and_in_the_result(rt: Any) -> None:
    # (Arguments: a UnicodeEncodeError from the worker's encoder at the
    # call. Result: the worker crashed writing its done message.)
    install(rt, timeout_ms=5000)
    rt.tools.register(echo_tool())
    code = "try:\n    await tools.echo(message={'k\\udfff': 1})\nexcept TypeError as exc:\n    return str(exc)"
    result = run_code(rt, code)
    problem = 'arguments.message: the dict key "k\\udfff" has a lone surrogate and is not JSON'
    assert result.value["result"] == f"tools.echo(): {problem}"
    message = failed_as(run_code(rt, "return {'ok': [{'a': 1, '\\ud800': 2}]}"), "result")
    assert message.startswith(
        'code run failed (result): the returned value is not JSON: result.ok[0]: the dict key "\\ud800" '
        "has a lone surrogate and is not JSON\n"
    ), message


def test_a_huge_exception_message_is_cut_and_not_taken_for_a_returned_value(rt: Any) -> None:
    # (9 MB: a done line past the message limit, reported as "the program
    # returned a value of more than ..."; 200 KB went whole to the model.)
    install(rt, timeout_ms=20000)
    message = failed_as(run_code(rt, "raise ValueError('x' * 9_000_000)"), "error")
    assert message.startswith("code run failed (error): ValueError: " + "x" * 1000)
    assert "... (9,000,012 characters)" in message
    assert len(message) < 12_000


def test_a_progress_message_with_a_lone_surrogate_is_a_value_error_at_the_call(rt: Any) -> None:
    install(rt, timeout_ms=5000)
    code = "try:\n    report_progress(1, message='\\ud800')\nexcept ValueError as exc:\n    return str(exc)"
    result = run_code(rt, code)
    assert result.value["result"] == "report_progress(message=...): a str with a lone surrogate is not JSON"


def test_a_progress_message_past_the_message_limit_is_the_programs_output(rt: Any) -> None:
    # (It was blamed on the worker: "protocol: the worker sent a message of more than ...".)
    install(rt, timeout_ms=20000)
    message = failed_as(run_code(rt, "report_progress(1, message='p' * 9_000_000)"), "output")
    assert "the program reported progress with a message of more than 8388608 bytes as JSON" in message


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (["[]"], "a message that is not a JSON object but an array"),
        (['{"t":"ready","v":{"x":1}}'], "the worker speaks version an object, not 1"),
        ([READY, "<read>", "[1, 2]"], "a message that is not a JSON object but an array"),
        ([READY, "<read>", '{"t":{"a":1}}'], 'a message without its kind (a "t" string): an object'),
        ([READY, "<read>", '{"t":"' + "y" * 100_000 + '"}'], "an unexpected message '" + "y" * 60 + "'... (100,000"),
        ([READY, "<read>", '{"t":"call","id":true,"name":"echo","args":{}}'], "call id a boolean, expected 1"),
    ],
    ids=["not-an-object-for-ready", "version-object", "array", "kind-object", "kind-long", "call-id-bool"],
)
def test_a_bad_message_from_the_worker_is_a_short_clear_protocol_error(rt: Any, lines: list[str], problem: str) -> None:
    install(rt, timeout_ms=5000, worker_command=fake_worker(*lines))
    rt.tools.register(echo_tool())
    message = failed_as(run_code(rt, "return 1"), "protocol")
    assert message.startswith(f"code run failed (protocol): the worker broke the protocol: {problem}"), message[:300]
    assert "FrozenDict" not in message
    assert len(message) < 500


def test_a_call_to_a_tool_that_is_not_bound_is_listed_as_the_failure_the_program_got(rt: Any) -> None:
    # (It was listed as "not started", though the program got UNKNOWN_TOOL.)
    done = '{"t":"done","ok":false,"kind":"error","message":"ToolError: unknown tool","traceback":""}'
    call = '{"t":"call","id":1,"name":"nope","args":{}}'
    install(rt, timeout_ms=5000, worker_command=fake_worker(READY, "<read>", call, "<read>", done))
    message = failed_as(run_code(rt, "return 1"), "error")
    assert '- c1:ptc:1 nope: failed (UNKNOWN_TOOL): unknown tool "nope"' in message


def test_a_worker_that_is_never_ready_times_out_saying_so_with_its_stderr(rt: Any) -> None:
    # (It said "the program did not finish within ...", as if it had started.)
    launcher = "import sys\nsys.stderr.write('pulling the image\\n')\nsys.stderr.flush()\nsys.stdin.read()"
    install(rt, timeout_ms=1500, worker_command=[sys.executable, "-c", launcher])
    message = failed_as(run_code(rt, "return 1"), "timeout")
    assert message.startswith(
        "code run failed (timeout): the worker process was not ready within 1500 ms (the program did not start)"
        "\n\nWorker stderr:\npulling the image"
    ), message


def test_threads_of_a_program_printing_at_once_do_not_break_the_protocol(rt: Any) -> None:
    # (Messages past PIPE_BUF interleaved on the protocol pipe: "protocol:
    # the worker broke the protocol: a line that is not JSON".)
    install(rt, timeout_ms=20000, max_output_bytes=4_000_000)
    code = (
        "import threading\n"
        "start = threading.Barrier(4)\n"
        "def chatter(digit):\n"
        "    start.wait()\n"
        "    for _ in range(100):\n"
        "        print(str(digit) * 5000)\n"
        "threads = [threading.Thread(target=chatter, args=(i,)) for i in range(4)]\n"
        "for thread in threads:\n"
        "    thread.start()\n"
        "for thread in threads:\n"
        "    thread.join()\n"
        "return 'done'"
    )
    result = run_code(rt, code)
    assert not result.is_error, result.error.message[:300]
    output = result.value["output"]  # (two threads' prints may mix within a line, as in any Python)
    assert sorted(set(output)) == ["\n", "0", "1", "2", "3"]
    assert [output.count(c) for c in "\n0123"] == [400, 500_000, 500_000, 500_000, 500_000]


def test_an_exception_whose_type_cannot_be_named_fails_the_run_as_an_error_without_the_workers_traceback(
    rt: Any,
) -> None:
    # (The worker crashed formatting it: "crashed", with the worker's own
    # traceback, worker.py and asyncio frames, as the program's output.)
    install(rt, timeout_ms=5000)
    code = (
        "class M(type):\n    def __getattribute__(cls, name):\n"
        "        if name in ('__name__', '__qualname__', '__module__'):\n            raise RuntimeError(name)\n"
        "        return type.__getattribute__(cls, name)\nclass E(Exception, metaclass=M):\n    pass\nraise E('x')"
    )
    message = failed_as(run_code(rt, code), "error")
    assert message.startswith("code run failed (error): E: <exception that cannot be printed>\n"), message[:300]
    assert "worker.py" not in message and "asyncio" not in message
    assert 'File "<run_code>", line 8, in __run_code__' in message  # the program's own frame


def test_the_headline_is_the_exceptions_line_not_a_note_added_to_it(rt: Any) -> None:
    # (The headline was the traceback's last line: the last note.)
    install(rt, timeout_ms=5000)
    message = failed_as(
        run_code(rt, "err = ValueError('bad input')\nerr.add_note('while reading a.txt')\nraise err"), "error"
    )
    assert message.startswith("code run failed (error): ValueError: bad input\n\n"), message[:300]
    assert "ValueError: bad input\nwhile reading a.txt" in message  # the traceback keeps the note
