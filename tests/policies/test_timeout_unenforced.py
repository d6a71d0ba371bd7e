"""A tool that declares ``timeout_ms`` on a runtime that does not enforce it
(no ``policies.timeout``): one DEBUG line per tool says so, and only when
the application has enabled the library's log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loguru import logger
from policy_helpers import call, run, tool

import policies


def unenforced(records: Any, name: str) -> list[Any]:
    """The lines saying ``name``'s timeout_ms is not enforced, of the
    records a ``log_records`` sink took."""
    return [r for r in records.items if f'tool "{name}" declares timeout_ms' in r["message"]]


def test_a_declared_timeout_that_nothing_enforces_is_logged_once_per_tool(
    rt: Any, log_records: Callable[[str], Any]
) -> None:
    records = log_records("DEBUG")
    rt.tools.register(tool("slow_unenforced", timeout_ms=250))
    rt.tools.register(tool("fast_unenforced"))  # no timeout_ms: nothing to say

    run(rt, call("slow_unenforced", id="c1"), call("slow_unenforced", id="c2"), call("fast_unenforced", id="c3"))
    run(rt, call("slow_unenforced", id="c4"))

    [line] = unenforced(records, "slow_unenforced")
    assert line["level"].name == "DEBUG"
    assert "timeout_ms=250" in line["message"] and "rt.use(policies.timeout)" in line["message"]
    assert unenforced(records, "fast_unenforced") == []


def test_nothing_is_logged_where_the_timeout_policy_enforces_it(rt: Any, log_records: Callable[[str], Any]) -> None:
    records = log_records("DEBUG")
    rt.use(policies.timeout)
    rt.events.on("tools/execute", lambda execution, next_: next_())  # another wrapper inside it changes nothing
    rt.tools.register(tool("slow_enforced", timeout_ms=60_000))

    assert not run(rt, call("slow_enforced")).results[0].result.is_error

    assert unenforced(records, "slow_enforced") == []


def test_another_wrapper_alone_does_not_enforce_it(rt: Any, log_records: Callable[[str], Any]) -> None:
    records = log_records("DEBUG")
    rt.use(policies.retry, tools=("slow_retried",))  # wraps the call, gives it no deadline
    rt.tools.register(tool("slow_retried", timeout_ms=60_000, idempotent=True))

    run(rt, call("slow_retried"))

    assert len(unenforced(records, "slow_retried")) == 1


def test_the_line_is_silent_until_the_application_enables_the_log(rt: Any) -> None:
    messages: list[str] = []
    handle = logger.add(lambda message: messages.append(message.record["message"]), level="DEBUG")
    try:  # a sink of the application's, but the library's log left disabled
        rt.tools.register(tool("slow_silent", timeout_ms=250))
        run(rt, call("slow_silent"))
    finally:
        logger.remove(handle)
    assert [m for m in messages if "slow_silent" in m] == []
