"""notifications/tools/list_changed, pagination and output schemas against
a low-level MCP server whose tool list changes (tests/mcp/server_changing.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from mcp_harness import ServerConnection

from dsh_actors import Agent, TextBlock, ToolBatchInput, ToolCall, ToolExecutionSuccess, ToolRuntime, ToolsService
from dsh_actors.errors import RegistrationError
from dsh_actors.events import Disposer
from dsh_actors.json import thaw
from dsh_actors.mcp import mount


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerConnection]:
    connection = ServerConnection("server_changing.py", tmp_path_factory.mktemp("mcp") / "server.log").start()
    try:
        yield connection
    finally:
        connection.close()


def run(rt: ToolRuntime, name: str) -> Any:
    return rt.tools.execute(ToolBatchInput(calls=(ToolCall(id="c1", name=name, arguments={}),))).results[0].result


def names(rt: ToolRuntime) -> set[str]:
    return {s["name"] for s in rt.tools.schemas()}


def test_every_page_is_listed_and_output_schemas_are_enforced(conn: ServerConnection, rt: ToolRuntime) -> None:
    assert conn.session is not None
    unmount = conn.run(mount(rt, conn.session))
    try:
        # Seven tools, two per page.
        assert names(rt) == {"alpha", "beta", "gamma", "swap", "bad_output", "no_structured", "good_output"}
        good = run(rt, "good_output")
        assert thaw(good.value) == {"n": 3} and good.content == (TextBlock('{"n": 3}'),)
        bad = run(rt, "bad_output")
        assert bad.is_error and bad.error.info is not None and bad.error.info.code == "INVALID_TOOL_OUTPUT"
        assert bad.error.message == 'tool "bad_output" returned invalid output: "value.n" must be >= 0'
        none = run(rt, "no_structured")
        assert none.is_error and none.error.info is not None and none.error.info.code == "INVALID_TOOL_OUTPUT"
        assert "returned no structuredContent" in none.error.message
    finally:
        unmount()


@pytest.mark.usefixtures("library_logs")
def test_list_changed_relists_and_swaps_the_registrations(conn: ServerConnection, rt: ToolRuntime) -> None:
    assert conn.session is not None
    unmount = conn.run(mount(rt, conn.session, prefix="x_"))
    gamma = rt.tools.get("x_gamma")
    beta = rt.tools.get("x_beta")
    changed = threading.Event()
    expected = {"x_beta", "x_gamma", "x_delta", "x_swap", "x_bad_output", "x_no_structured", "x_good_output"}

    def on_change() -> None:
        if names(rt) == expected:
            changed.set()

    errors: list[str] = []
    sink = logger.add(lambda message: errors.append(str(message)), level="ERROR", filter="dsh_actors")
    off = rt.events.on("tools/change", on_change)
    try:
        assert run(rt, "x_swap").content == (TextBlock("swapped"),)
        assert changed.wait(20), names(rt)
        conn.idle()
        assert rt.tools.get("x_alpha") is None  # withdrawn
        assert rt.tools.get("x_gamma") is gamma  # unchanged: the same registration
        new_beta = rt.tools.get("x_beta")
        assert new_beta is not None and new_beta is not beta
        assert new_beta.description == "the changed beta tool"
        assert run(rt, "x_delta").content == (TextBlock("delta: the delta tool"),)
        # The tool with a remote reference was left out, and said so.
        assert any("remote reference" in e and "remote" in e for e in errors), errors
    finally:
        off()
        logger.remove(sink)
        unmount()
    assert not names(rt)


def test_a_batch_during_a_relisting_sees_the_old_listing_or_the_new_never_a_gap(
    tmp_path: Path, rt: ToolRuntime
) -> None:
    # The swap changes beta (and removes alpha, adds delta). Before, the
    # re-listing withdrew the old beta in one registry change and registered
    # the new one in another: a batch that opened between them (here, one
    # opened at every change the re-listing announces, which reads the
    # registry as it was before that change) failed UNKNOWN_TOOL for a tool
    # listed before and after. Now the re-listing is one change.
    probe = Agent("probe")
    seen: list[str] = []
    relisted = threading.Event()

    def look_up(execution: Any, next_: Any) -> Any:  # the probe's calls run nothing: they say what they found
        if execution.definition is None:
            return next_()  # (no tool: the call fails as it would)
        return ToolExecutionSuccess(value=execution.definition.description, content=(TextBlock("found"),))

    def probe_beta() -> str:
        batch = ToolBatchInput(calls=(ToolCall(id="p1", name="y_beta", arguments={}),), agent=probe)
        outcome = rt.tools.execute(batch).results[0].result
        return f"{outcome.error.info.code}: {outcome.error.message}" if outcome.is_error else str(outcome.value)

    def on_change() -> None:
        seen.append(probe_beta())
        if rt.tools.get("y_delta") is not None:
            relisted.set()

    connection = ServerConnection("server_changing.py", tmp_path / "server.log").start()
    try:
        assert connection.session is not None
        unmount = connection.run(mount(rt, connection.session, prefix="y_"))
        rt.events.on("tools/execute", look_up, scope=probe)
        off = rt.events.on("tools/change", on_change)
        try:
            assert run(rt, "y_swap").content == (TextBlock("swapped"),)
            assert relisted.wait(20), names(rt)
            connection.idle()
        finally:
            off()
            unmount()
    finally:
        connection.close()
    # One change, announced once: while it was, a batch still read the old listing.
    assert seen == ["the beta tool"], seen


def test_a_server_with_an_unenforceable_schema_is_refused_whole(tmp_path: Path, rt: ToolRuntime) -> None:
    connection = ServerConnection("server_changing.py", tmp_path / "server.log", env={"START_WITH_REMOTE": "1"}).start()
    try:
        assert connection.session is not None
        with pytest.raises(RegistrationError) as caught:
            connection.run(mount(rt, connection.session))
        assert 'tool "remote"' in caught.value.message
        assert 'remote reference "https://schemas.invalid/x.json" is not supported' in caught.value.message
        assert not names(rt)
    finally:
        connection.close()


def test_a_list_changed_while_mount_lists_relists_once_the_listing_is_registered(
    tmp_path: Path, rt: ToolRuntime
) -> None:
    # The server changes its tools between two pages of the first listing,
    # which then holds alpha (removed) and misses gamma (moved to an earlier
    # page). Before, the mount attached its handler only after that listing:
    # the notification was lost and the mount kept the stale tools.
    expected = {"beta", "gamma", "delta", "swap", "bad_output", "no_structured", "good_output"}
    relisted = threading.Event()

    def on_change() -> None:
        if names(rt) == expected:
            relisted.set()

    off = rt.events.on("tools/change", on_change)
    connection = ServerConnection(
        "server_changing.py", tmp_path / "server.log", env={"CHANGE_WHILE_LISTING": "1"}
    ).start()
    try:
        assert connection.session is not None
        unmount = connection.run(mount(rt, connection.session))
        try:
            assert relisted.wait(20), names(rt)
            beta = rt.tools.get("beta")
            assert beta is not None and beta.description == "the changed beta tool"
        finally:
            unmount()
    finally:
        off()
        connection.close()


@pytest.mark.usefixtures("library_logs")
def test_a_swap_that_timed_out_is_made_again_by_the_next_relisting(
    tmp_path: Path, rt: ToolRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The re-listing's one registry change times out and is applied late:
    # register_all then withdraws what it registered, and what it replaced
    # (alpha, the old beta) stays withdrawn (its docstring). Before, the
    # mount kept its old record, so when the server listed alpha and beta
    # as they were again, the next re-listing "kept" two tools that were
    # no longer registered.
    first = {"z_alpha", "z_beta", "z_gamma", "z_swap", "z_bad_output", "z_no_structured", "z_good_output"}
    real = ToolsService.register_all
    timed_out = threading.Event()
    restored = threading.Event()

    def applied_late(self: ToolsService, definitions: Any, *, when: Any = None, replacing: Any = ()) -> list[Disposer]:
        monkeypatch.setattr(ToolsService, "register_all", real)  # (once)
        for dispose in real(self, definitions, when=when, replacing=replacing):
            dispose()
        timed_out.set()
        raise TimeoutError("the registry change did not finish within 30.0s (a tools/change listener has not returned)")

    def on_change() -> None:
        if names(rt) == first:
            restored.set()

    errors: list[str] = []
    sink = logger.add(lambda message: errors.append(str(message)), level="ERROR", filter="dsh_actors")
    connection = ServerConnection("server_changing.py", tmp_path / "server.log").start()
    try:
        assert connection.session is not None
        unmount = connection.run(mount(rt, connection.session, prefix="z_"))
        try:
            assert names(rt) == first
            monkeypatch.setattr(ToolsService, "register_all", applied_late)
            assert run(rt, "z_swap").content == (TextBlock("swapped"),)
            assert timed_out.wait(20)
            connection.idle()
            assert names(rt) == first - {"z_alpha", "z_beta"}  # only the kept ones stay
            off = rt.events.on("tools/change", on_change)
            try:
                assert run(rt, "z_swap").content == (TextBlock("swapped"),)  # back to the first listing
                assert restored.wait(20), names(rt)
                connection.idle()
            finally:
                off()
            beta = rt.tools.get("z_beta")
            assert beta is not None and beta.description == "the beta tool"
            assert any("did not take the re-listed tools in time" in e for e in errors), errors
        finally:
            unmount()
    finally:
        logger.remove(sink)
        connection.close()
    assert not names(rt)
