"""The program convention (SPEC section 7): the body of an async def,
`await tools.NAME(...)`, asyncio.gather, captured print, the value
{"result", "output"}, and how failures reach the model."""

from __future__ import annotations

import threading
from typing import Any

from dsh_actors import ToolExecutionSuccess
from executors.ptc import run as ptc_run

from .helpers import GUARD, code_of, echo_tool, run_code, tool


def test_a_program_awaits_tools_returns_a_value_and_its_print_output_is_captured(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    result = run_code(
        rt,
        'print("starting")\n'
        'first = await tools.echo(message="a")\n'
        "print('got', first)\n"
        "return {'first': first, 'n': 3}\n",
    )
    assert type(result) is ToolExecutionSuccess
    assert result.value == {"result": {"first": {"message": "a"}, "n": 3}, "output": "starting\ngot {'message': 'a'}\n"}
    assert result.content[0].text.startswith('result: {"first":{"message":"a"},"n":3}\noutput:\nstarting\n')


def test_a_program_without_return_gives_a_null_result(rt: Any, ptc: Any) -> None:
    result = run_code(rt, "x = 1")
    assert result.value == {"result": None, "output": ""}
    assert result.content[0].text == "result: null"


def test_a_tool_is_called_with_keywords_positionals_or_one_positional_dict(rt: Any, ptc: Any) -> None:
    rt.tools.register(
        tool(
            "pair",
            lambda args, ctx: dict(args),
            parameters={"a": {"type": "string", "required": True}, "b": {"type": "integer"}},
        )
    )
    result = run_code(
        rt,
        "return [await tools.pair(a='x', b=1), await tools.pair('y', 2), await tools.pair({'a': 'z'}),"
        " await tools.pair('w', b=None)]",
    )
    assert result.value["result"] == ({"a": "x", "b": 1}, {"a": "y", "b": 2}, {"a": "z"}, {"a": "w"})


def test_a_parameter_named_self_is_passed_by_keyword_as_its_signature_shows(rt: Any, ptc: Any) -> None:
    # (It raised "TypeError: Tool.__call__() got multiple values for argument 'self'".)
    rt.tools.register(tool("t", lambda args, ctx: dict(args), parameters={"self": {"type": "string"}}))
    result = run_code(
        rt,
        "first = await tools.t(self='a')\ntry:\n    await tools.t('b', self='c')\nexcept TypeError as err:\n"
        "    return [first, str(err)]",
    )
    assert result.value["result"] == ({"self": "a"}, "tools.t() got multiple values for argument 'self'")


def test_asyncio_gather_runs_safe_calls_concurrently(rt: Any, ptc: Any) -> None:
    both_in = threading.Barrier(2, timeout=GUARD)  # passes only if the two calls overlap

    def meet(args: Any, ctx: Any) -> str:
        both_in.wait()
        return args["who"]

    rt.tools.register(tool("meet", meet, parameters={"who": {"type": "string"}}))
    result = run_code(rt, "return list(await asyncio.gather(tools.meet(who='a'), tools.meet(who='b')))")
    assert result.value["result"] == ("a", "b")


def test_a_failed_sub_call_raises_a_tool_error_the_program_can_catch(rt: Any, ptc: Any) -> None:
    def refuse(args: Any, ctx: Any) -> Any:
        raise ValueError("the disk is read-only")

    rt.tools.register(tool("write", refuse))
    rt.tools.register(tool("need", lambda args, ctx: "ok", parameters={"x": {"type": "integer", "required": True}}))
    result = run_code(
        rt,
        "out = []\n"
        "try:\n"
        "    await tools.write()\n"
        "except ToolError as err:\n"
        "    out.append([str(err), err.code, err.error_name, err.tool, err.call_id])\n"
        "try:\n"
        "    await tools.need(x='not an int')\n"
        "except ToolError as err:\n"
        "    out.append([str(err), err.code, err.error_name])\n"
        "return out\n",
    )
    # A plain exception in the tool body: its class name reaches the program.
    assert result.value["result"][0] == ("the disk is read-only", "TOOL_FAILED", "ValueError", "write", "c1:ptc:1")
    message, code, error_name = result.value["result"][1]
    assert code == "INVALID_ARGS" and error_name == "ToolArgsError" and message.startswith("invalid arguments:")


def test_an_uncaught_tool_error_fails_the_run_with_the_traceback_output_and_the_sub_calls(rt: Any, ptc: Any) -> None:
    def refuse(args: Any, ctx: Any) -> Any:
        raise ValueError("no such file")

    rt.tools.register(echo_tool())
    rt.tools.register(tool("read", refuse))
    result = run_code(
        rt,
        "await tools.echo(message='one')\nprint('before the failure')\ndata = await tools.read()\nreturn data\n",
    )
    assert code_of(result) == "CODE_RUN_FAILED"
    message = result.error.message
    assert message.startswith("code run failed (error): ToolError: no such file\n")
    assert 'File "<run_code>", line 3' in message and "data = await tools.read()" in message
    assert "worker.py" not in message  # the worker's own frames are not shown
    assert "- c1:ptc:1 echo: succeeded" in message
    assert "- c1:ptc:2 read: failed (ValueError): no such file" in message
    assert message.endswith("Output before the run ended:\nbefore the failure\n")
    assert result.error.info.name == "CodeRunFailedError"


def test_the_workers_frames_are_not_shown_in_an_exception_groups_tracebacks_either(rt: Any, ptc: Any) -> None:
    # A TaskGroup whose tool call failed raises an ExceptionGroup: each of
    # its exceptions' tracebacks is cut to the program's frames as well.
    def refuse(args: Any, ctx: Any) -> Any:
        raise ValueError("no such file")

    rt.tools.register(echo_tool())
    rt.tools.register(tool("read", refuse))
    code = (
        "async with asyncio.TaskGroup() as group:\n"
        "    group.create_task(tools.echo(message='one'))\n"
        "    group.create_task(tools.read())\n"
    )
    message = run_code(rt, code).error.message
    assert message.startswith(
        "code run failed (error): ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
    ), message
    assert "| ToolError: no such file\n" in message
    assert "worker.py" not in message, message


def test_a_programs_thread_prints_its_traceback_cut_to_the_programs_frames(rt: Any, ptc: Any) -> None:
    # A thread the program starts that raises: threading's hook prints its
    # traceback to the captured stderr, cut as a failed run's is (no frame
    # of the worker's audit hook, nor threading's own before the program's).
    code = (
        "import threading\n"
        "def write():\n"
        "    open('/outside/file.txt', 'w')\n"
        "thread = threading.Thread(target=write, name='writer')\n"
        "thread.start()\n"
        "thread.join()\n"
        "return 'joined'\n"
    )
    result = run_code(rt, code)
    assert result.value["result"] == "joined"
    assert result.value["output"] == (
        "Exception in thread writer:\n"
        "Traceback (most recent call last):\n"
        '  File "<run_code>", line 3, in write\n'
        "    open('/outside/file.txt', 'w')\n"
        "Blocked: run_code does not allow writing '/outside/file.txt' (outside its working folder)\n"
    )


def test_a_program_past_the_call_limit_is_told_to_split_its_work(rt: Any, ptc: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(ptc_run, "MAX_SUB_CALLS", 3)  # (10,000 calls take seconds)
    rt.tools.register(echo_tool())
    message = run_code(rt, "for i in range(5):\n    await tools.echo(message=str(i))").error.message
    assert message.startswith(
        "code run failed (limit): the program made more than 3 tool calls, the most one run may make: "
        "split the work over several runs\n\nTool calls the program made (3):\n"
    ), message


def test_a_failed_run_lists_the_first_and_last_calls_and_tallies_the_rest(rt: Any, ptc: Any) -> None:
    """The message goes to the model: a program that made many calls gets
    the first and the last 20 listed and a tally of the ones between, not
    one line a call (up to 10,000)."""

    def echo_or_fail(args: Any, ctx: Any) -> Any:
        if args["i"] % 2:
            raise ValueError(f"odd {args['i']}")
        return args["i"]

    rt.tools.register(tool("step", echo_or_fail, parameters={"i": {"type": "integer", "required": True}}))
    program = (
        "for i in range(1, 51):\n"
        "    try:\n"
        "        await tools.step(i=i)\n"
        "    except ToolError:\n"
        "        pass\n"
        "raise RuntimeError('done badly')\n"
    )
    result = run_code(rt, program)
    assert code_of(result) == "CODE_RUN_FAILED"
    lines = result.error.message.split("Tool calls the program made (50):\n")[1].split("\n\n")[0].split("\n")
    assert len(lines) == 41
    assert lines[0] == "- c1:ptc:1 step: failed (ValueError): odd 1"
    assert lines[19] == "- c1:ptc:20 step: succeeded"
    assert lines[20] == "- ... 10 more: 5 succeeded, 5 failed"
    assert lines[21] == "- c1:ptc:31 step: failed (ValueError): odd 31"
    assert lines[40] == "- c1:ptc:50 step: succeeded"


def test_an_uncaught_exception_of_the_program_itself_fails_the_run(rt: Any, ptc: Any) -> None:
    result = run_code(rt, "def half(x):\n    return x / 0\nreturn half(3)\n")
    assert code_of(result) == "CODE_RUN_FAILED"
    assert result.error.message.startswith("code run failed (error): ZeroDivisionError: division by zero")
    assert "The program made no tool calls." in result.error.message


def test_a_returned_value_that_is_not_json_fails_the_run_clearly(rt: Any, ptc: Any) -> None:
    result = run_code(rt, "return {'a': {1, 2}}")
    assert result.error.message.startswith(
        "code run failed (result): the returned value is not JSON: result.a: a set is not JSON"
    )
    nan = run_code(rt, "return [float('nan')]")
    assert "result[0]: the float nan is not JSON" in nan.error.message


def test_a_returned_value_nested_too_deep_names_a_short_path(rt: Any, ptc: Any) -> None:
    result = run_code(rt, "d = 1\nfor _ in range(1000):\n    d = [d]\nreturn d")
    assert result.error.message.startswith(
        "code run failed (result): the returned value is not JSON: result"
        + "[0]" * 8
        + " … (234 more) … "
        + "[0]" * 8
        + ": nesting deeper than 250 levels"
    )


def test_a_syntax_error_fails_the_run_before_anything_runs(rt: Any, ptc: Any) -> None:
    result = run_code(rt, "x = = 1")
    assert result.error.message.startswith("code run failed (syntax): SyntaxError: invalid syntax")
    assert 'File "<run_code>", line 1' in result.error.message


def test_calling_a_tool_that_is_not_bound_raises_attribute_error_naming_the_tools(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    result = run_code(rt, "await tools.nothing()")
    assert "AttributeError: there is no tool 'nothing' (available: echo)" in result.error.message


def test_calling_run_code_from_a_program_says_a_program_cannot_run_code_itself(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    result = run_code(rt, "await tools.run_code(code='return 1')")
    assert (
        "AttributeError: there is no tool 'run_code': a program cannot run code itself; "
        "call the tools directly (available: echo)"
    ) in result.error.message


def test_arguments_that_are_not_json_raise_type_error_at_the_call(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    result = run_code(
        rt,
        "try:\n    await tools.echo(message={1})\nexcept TypeError as err:\n    return str(err)\n",
    )
    assert (
        result.value["result"]
        == "tools.echo(): arguments.message: a set is not JSON (use dict, list, str, int, float, bool or None)"
    )


def test_an_int_past_what_str_can_print_is_named_by_its_size_not_a_worker_crash(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    for code, problem in (
        ("return 10**5000", "result: an int of 16610 bits"),
        ("return {10**5000: 1}", "result: a dict key must be a str, not int of 16610 bits"),
    ):
        message = run_code(rt, code).error.message
        assert message.startswith(f"code run failed (result): the returned value is not JSON: {problem}"), message
    result = run_code(rt, "try:\n    await tools.echo(message=10**5000)\nexcept TypeError as err:\n    return str(err)")
    assert result.value["result"] == (
        "tools.echo(): arguments.message: an int of 16610 bits is outside [-2**63, 2**64-1]"
    )


def test_a_tool_call_without_await_is_named_as_such_and_python_warns_with_the_programs_line(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    message = run_code(rt, "return tools.echo(message='x')").error.message
    assert message == (
        "code run failed (result): the returned value is not JSON: "
        "result: the call to tools.echo() was not awaited: await it\n\nThe program made no tool calls."
    )
    result = run_code(
        rt,
        "try:\n    await tools.echo(message=tools.echo(message='x'))\nexcept TypeError as err:\n    return str(err)",
    )
    assert result.value == {
        "result": "tools.echo(): arguments.message: the call to tools.echo() was not awaited: await it",
        "output": "",
    }
    # A bare call: Python's own warning, naming the tool at the program's line.
    output = run_code(rt, "tools.echo(message='x')\nreturn 1").value["output"]
    assert output.startswith("<run_code>:1: RuntimeWarning: coroutine 'tools.echo' was never awaited\n"), output


def test_output_printed_before_a_call_stays_before_it_and_stderr_is_captured_too(rt: Any, ptc: Any) -> None:
    seen: list[str] = []
    rt.tools.register(tool("mark", lambda args, ctx: seen.append("call") or "m"))
    result = run_code(
        rt,
        "import sys\nprint('a', end='')\nawait tools.mark()\nprint('b', file=sys.stderr)\nreturn 1",
    )
    assert result.value == {"result": 1, "output": "ab\n"}
    assert seen == ["call"]
