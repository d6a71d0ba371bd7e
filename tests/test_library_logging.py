"""The library's log, as an application that enables it sees it.

An exception the application's code raised (a tool's body, a listener, an
abort callback, a stop hook, a done-callback of a batch's future) is logged
with its own traceback as text (``errors.log_exception``), never handed to
loguru as the record's exception: loguru's default sink (``backtrace`` and
``diagnose`` on) would print every frame of the runtime's thread that
caught it, with the values of their variables, the runtime's objects
among them."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

from dsh_actors import (
    AbortController,
    ToolArgsError,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    is_fault,
    text,
)

GUARD = 10.0  # seconds; only ever reached if something deadlocks

# What loguru's default sink shows of the runtime when it renders an exception:
# the threads' frames, and the values of variables (pykka's envelopes, our actors).
INTERNALS = re.compile(r"object at 0x|dsh_actors\.\w+(\.\w+)*[ (]|Envelope\(|threading\.py|pykka|│|└")


class Lines:
    """What a sink with loguru's defaults (its default format, ``backtrace``
    and ``diagnose`` on) printed; ``logged`` is set at each message."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.logged = threading.Event()

    def write(self, message: str) -> None:
        self.texts.append(str(message))
        self.logged.set()


@pytest.fixture
def printed(library_logs: None) -> Iterator[Lines]:
    lines = Lines()
    handle = logger.add(lines.write, level="ERROR", backtrace=True, diagnose=True, colorize=False)
    try:
        yield lines
    finally:
        logger.remove(handle)


def applications_code() -> Any:
    return {}["no such key"]


class Stop(BaseException):
    """What a done-callback raises that ``concurrent.futures`` lets escape."""


def one_tool(rt: ToolRuntime, body: Any = None) -> None:
    rt.tools.register(
        define_tool(
            name="t",
            description="A tool.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
            execute=body or (lambda args, ctx: applications_code()),
        )
    )


def batch() -> ToolBatchInput:
    return ToolBatchInput(calls=[ToolCall("c1", "t", "{}")])


def assert_the_applications_traceback_alone(lines: Lines, *headline: str) -> None:
    [shown] = lines.texts
    assert all(part in shown.splitlines()[0] for part in headline), shown
    assert "Traceback (most recent call last):" in shown
    assert 'in applications_code\n    return {}["no such key"]' in shown  # the application's frame
    assert shown.rstrip().endswith("KeyError: 'no such key'")
    assert INTERNALS.search(shown) is None, shown


def test_a_tools_exception_is_logged_with_its_own_traceback(printed: Lines) -> None:
    with ToolRuntime() as rt:
        one_tool(rt)
        rt.tools.execute(batch())
    assert_the_applications_traceback_alone(printed, 'tool "t" (call c1) failed: KeyError')


def test_a_listeners_exception_is_logged_with_its_own_traceback(printed: Lines) -> None:
    with ToolRuntime() as rt:
        one_tool(rt, lambda args, ctx: "ok")
        rt.events.on("tools/result", lambda execution, result: applications_code())
        rt.tools.execute(batch())
    assert_the_applications_traceback_alone(printed, "tools/result listener ", "<lambda> raised: 'no such key'")


def test_an_abort_callbacks_exception_is_logged_with_its_own_traceback(printed: Lines) -> None:
    controller = AbortController()
    controller.signal.add_callback(lambda signal: applications_code())
    controller.abort()
    assert_the_applications_traceback_alone(printed, "abort callback ", "<lambda> raised; ignored")


def test_a_stop_hooks_exception_is_logged_with_its_own_traceback(printed: Lines) -> None:
    with ToolRuntime() as rt:
        rt.on_stop(applications_code)
    assert_the_applications_traceback_alone(printed, "a runtime stop hook failed")


def test_a_done_callbacks_exception_is_logged_with_its_own_traceback(printed: Lines) -> None:
    gate = threading.Event()

    def callback(future: Any) -> None:
        try:
            applications_code()
        except KeyError as exc:
            raise Stop() from exc

    with ToolRuntime() as rt:
        one_tool(rt, lambda args, ctx: "ok" if gate.wait(GUARD) else "late")
        future = rt.tools.submit(batch())
        future.add_done_callback(callback)  # (before the batch ends: the executor's actor runs it)
        gate.set()
        assert printed.logged.wait(GUARD)
    [shown] = printed.texts
    assert "a done-callback of a batch's future raised Stop" in shown.splitlines()[0]
    assert 'in applications_code\n    return {}["no such key"]' in shown and "in callback" in shown
    assert INTERNALS.search(shown) is None, shown


def an_async_tool(rt: ToolRuntime, body: Any) -> None:
    async def execute(args: Any, ctx: Any) -> Any:
        return body()

    rt.tools.register(
        define_tool(
            name="t",
            description="A tool.",
            parameters={"n": {"type": "integer", "required": True}},
            output=ToolOutput(schema={"type": "string"}),
            execute=execute,
        )
    )


def test_the_models_bad_arguments_to_an_async_body_under_a_wrapper_are_not_logged(printed: Lines) -> None:
    # (The exception came back to the wrapper's thread through a
    # concurrent.futures.Future, whose frames is_fault counted as the
    # application's code: an outcome was logged at ERROR with a traceback.)
    with ToolRuntime() as rt:
        an_async_tool(rt, lambda: "ok")
        rt.events.on("tools/execute", lambda execution, next_: next_())
        [outcome] = rt.tools.execute(ToolBatchInput(calls=[ToolCall("c1", "t", '{"n": "one"}')])).results
    assert outcome.result.error.info.code == "INVALID_ARGS"
    assert not is_fault(outcome.result.error.exception)
    assert printed.texts == []


def test_the_tools_own_args_error_from_an_async_body_under_a_wrapper_is_logged(printed: Lines) -> None:
    def refuses() -> Any:
        raise ToolArgsError(["the tool's own check"])

    with ToolRuntime() as rt:
        an_async_tool(rt, refuses)
        rt.events.on("tools/execute", lambda execution, next_: next_())
        [outcome] = rt.tools.execute(ToolBatchInput(calls=[ToolCall("c1", "t", '{"n": 1}')])).results
    assert outcome.result.error.info.code == "INVALID_ARGS"
    [shown] = printed.texts
    assert 'tool "t" (call c1) failed: invalid arguments' in shown.splitlines()[0]
    assert "in refuses\n" in shown


# -- whose choice the import keeps (a subprocess each: the order of imports matters) --

PACKAGES = ("dsh_actors", "policies", "executors")

_PROBE = """
import importlib, sys
from loguru import logger

logger.remove()
logged = []
logger.add(lambda message: logged.append(message.record["name"]), level="DEBUG")
for name in sys.argv[1:]:
    logger.enable(name)  # the application's choice, before it imports the packages
for package in ("dsh_actors", "policies", "executors"):
    importlib.import_module(package)
for package in ("dsh_actors", "policies", "executors"):
    for module in (package + ".a", package + ".b"):
        exec("logger.error('probe')", {"__name__": module, "logger": logger})  # a record of that module
print(" ".join(logged))
"""


def logged_modules(*enabled_first: str) -> list[str]:
    """The probe modules whose records a sink got, after the application
    enabled ``enabled_first`` and then imported the three packages."""
    import subprocess
    import sys
    from pathlib import Path

    run = subprocess.run(
        [sys.executable, "-c", _PROBE, *enabled_first],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return run.stdout.split()


def test_the_packages_are_silent_unless_the_application_enables_them() -> None:
    assert logged_modules() == []


def test_an_enable_before_the_import_is_kept() -> None:
    assert logged_modules(*PACKAGES) == [f"{p}.{m}" for p in PACKAGES for m in "ab"]


def test_an_enable_of_one_module_before_the_import_is_kept_and_the_rest_stays_silent() -> None:
    assert logged_modules(*(f"{p}.a" for p in PACKAGES)) == [f"{p}.a" for p in PACKAGES]
