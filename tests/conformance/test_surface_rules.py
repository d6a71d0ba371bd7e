"""Rules of SPEC sections 1, 5 and 7 that cut across the parts: plugins,
nested dispatch, executor-owned tools, the caller's signal, disposers."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from loguru import logger

from dsh_actors import (
    AbortController,
    Agent,
    Ask,
    NativeExecutor,
    ToolBatchInput,
    ToolCall,
    ToolExecutionInput,
    ToolOutput,
    ToolRestriction,
    ToolRuntime,
    define_tool,
    text,
)


def tool(name: str = "t", **kw: Any) -> Any:
    return define_tool(
        name=name,
        description=name,
        parameters={"x": {"type": "json"}},
        output=ToolOutput(
            schema={"type": "json"},
            render=lambda a, v: [text(repr(v))],
            presentation_meta=kw.pop("meta", None),
        ),
        execute=kw.pop("execute", lambda args, ctx: args.get("x")),
        is_concurrency_safe=lambda args: True,
        **kw,
    )


# -- plugins ---------------------------------------------------------------


class Plugin:
    def __init__(self) -> None:
        self.config: dict[str, Any] | None = None
        self.undone = 0

    def apply(self, rt: Any, **config: Any) -> Any:
        self.config = config
        off = rt.events.on("tools/pre-execute", lambda ex, nxt: nxt())

        def undo() -> None:
            self.undone += 1
            off()

        return undo


def test_use_applies_a_plugin_with_its_config_and_returns_an_idempotent_disposer(rt: Any) -> None:
    plugin = Plugin()
    dispose = rt.use(plugin, limit=3, name="x")
    assert plugin.config == {"limit": 3, "name": "x"}
    assert len(rt.events.listeners("tools/pre-execute")) == 1
    dispose()
    dispose()
    assert plugin.undone == 1
    assert rt.events.listeners("tools/pre-execute") == ()


def test_use_rejects_something_that_is_not_a_plugin(rt: Any) -> None:
    with pytest.raises(TypeError, match="not a plugin"):
        rt.use(object())


# -- nested dispatch -------------------------------------------------------


def test_dispatch_runs_one_call_through_every_phase_with_its_parent_and_root(rt: Any) -> None:
    seen: dict[str, Any] = {}
    rt.tools.register(tool("inner", meta=lambda a, v: {"shown": v}))
    rt.events.on("tools/pre-execute", lambda ex, nxt: (seen.setdefault("pre " + ex.name, ex), nxt())[1])
    rt.events.on("tools/result", lambda ex, res: seen.setdefault("result " + ex.name, res))

    def outer(args: Any, ctx: Any) -> Any:
        nested = rt.tools.dispatch(
            ToolExecutionInput(
                call_id=f"{ctx.call_id}:n:1",
                name="inner",
                arguments={"x": 7},
                signal=ctx.signal,
                root_call_id=ctx.root_call_id,
                agent=ctx.agent,
                parent=ctx.token,
            )
        )
        seen["parent_token"] = ctx.token
        return nested.value

    rt.tools.register(tool("outer", execute=outer, meta=lambda a, v: {"shown": v}))
    agent = Agent("a")
    batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "outer", "{}"),), agent=agent))
    outcome = batch.results[0].result
    assert outcome.value == 7
    assert outcome.meta == {"shown": 7}  # root call: presentation_meta runs
    nested_exec = seen["pre inner"]
    assert nested_exec.call_id == "c1:n:1"
    assert nested_exec.root_call_id == "c1"
    assert nested_exec.parent is seen["parent_token"]
    assert nested_exec.agent is agent
    assert seen["result inner"].value == 7
    assert seen["result inner"].meta is None  # nested call: no presentation_meta


def test_dispatch_of_an_unknown_tool_is_an_unknown_tool_failure(rt: Any) -> None:
    result = rt.tools.dispatch(
        ToolExecutionInput(call_id="x", name="nope", arguments={}, signal=AbortController().signal)
    )
    assert result.is_error and result.error.info.code == "UNKNOWN_TOOL"


def test_an_unknown_tool_names_the_nearest_tools_the_agent_may_call(rt: Any) -> None:
    main = Agent("main")
    for name in ("read_file", "write_file", "search_text"):
        rt.tools.register(tool(name))
    rt.tools.register(tool("read_files"), when=lambda context: True)  # (conditional: not executable without a set)
    rt.tools.scope(Agent("other")).register(tool("read_filez"))  # another agent's
    calls = [ToolCall("c1", "read_fille", "{}"), ToolCall("c2", "zzz", "{}"), ToolCall("c3", "r" * 10_000, "{}")]
    results = rt.tools.execute(ToolBatchInput(calls=calls, agent=main)).results
    messages = [r.result.error.message for r in results]
    assert messages[0] == 'unknown tool "read_fille". Did you mean "read_file" or "write_file"?'
    assert messages[1] == 'unknown tool "zzz"'
    assert messages[2] == f'unknown tool "{"r" * 64}..." (a name of 10,000 characters)'
    assert all(r.result.error.info.code == "UNKNOWN_TOOL" for r in results)


# -- executor-owned tools and the direct-call rule -------------------------


class OwnToolExecutor(NativeExecutor):
    def __init__(self, own: Any) -> None:
        super().__init__()
        self.own = own

    def executor_tools(self) -> Any:
        return (self.own,)

    def direct_call_hint(self, name: str) -> str | None:
        return "call it through the executor's own tool"


def test_an_executor_owned_tool_runs_through_the_pipeline_and_a_direct_native_call_runs_no_phase(
    rt: Any,
) -> None:
    phases: list[tuple[str, str]] = []
    results: list[str] = []
    rt.events.on("tools/pre-execute", lambda ex, nxt: (phases.append(("pre", ex.name)), nxt())[1])
    rt.events.on("tools/post-execute", lambda ex, res, nxt: (phases.append(("post", ex.name)), nxt())[1])
    rt.events.on("tools/result", lambda ex, res: results.append(ex.name))
    rt.tools.register(tool("native"))
    agent = Agent("a")
    rt.tools.scope(agent).set_executor(OwnToolExecutor(tool("own", execute=lambda a, c: "mine")))
    batch = rt.tools.execute(
        ToolBatchInput(calls=(ToolCall("c1", "own", "{}"), ToolCall("c2", "native", "{}")), agent=agent)
    )
    own, native = (r.result for r in batch.results)
    assert own.value == "mine"
    assert native.is_error and native.error.info.code == "UNKNOWN_TOOL"
    assert "call it through the executor's own tool" in native.error.message
    assert phases == [("pre", "own"), ("post", "own")]  # the direct call ran no phase
    assert results == ["own", "native"]  # ... but published exactly one tools/result


# -- the caller's signal ---------------------------------------------------


def test_pre_execute_post_execute_and_the_approval_request_see_one_signal_of_the_batch_and_the_stop(rt: Any) -> None:
    # One signal for every hook of the call (not a wrapper's replacement, not
    # one per phase): the batch's signal combined with rt.stop_signal, so a
    # hook waiting on it is woken by an abort of the batch and by a stop.
    controller = AbortController()
    seen: dict[str, Any] = {}
    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda ex, nxt: (seen.setdefault("pre", ex.signal), Ask("ok?"))[1])
    rt.events.on("tools/post-execute", lambda ex, res, nxt: (seen.setdefault("post", ex.signal), nxt())[1])
    rt.approvals.set(lambda request: (seen.setdefault("approval", request.signal), "allowed-once")[1])
    batch = rt.tools.execute(
        ToolBatchInput(calls=(ToolCall("c1", "t", "{}"),), agent=Agent("a"), signal=controller.signal)
    )
    assert not batch.results[0].result.is_error
    assert seen["pre"] is seen["post"] is seen["approval"]
    assert not seen["pre"].aborted and seen["pre"] is not rt.stop_signal
    # Without a batch signal: one of the batch's own, which the stop aborts
    # (the other test below), shared by its calls and by no other batch's.
    unsigned: list[tuple[str, Any]] = []
    rt.events.on(
        "tools/pre-execute", lambda ex, nxt: (unsigned.append((ex.call_id, ex.signal)), nxt())[1], prepend=True
    )
    for call_ids in (("c3", "c4"), ("c5",)):
        rt.tools.execute(ToolBatchInput(calls=tuple(ToolCall(i, "t", "{}") for i in call_ids), agent=Agent("c")))
    signals = dict(unsigned)
    assert signals["c3"] is signals["c4"] and signals["c5"] is not signals["c3"]
    assert all(signal is not rt.stop_signal and not signal.aborted for signal in signals.values())


@pytest.mark.parametrize("abort", ["batch", "stop", "stop, no batch signal"])
def test_the_hooks_signal_follows_the_batch_signal_and_the_stop(abort: str) -> None:
    controller = AbortController()
    entered, seen = threading.Event(), []

    def pre(ex: Any, nxt: Any) -> Any:
        entered.set()
        seen.append(ex.signal.wait(10.0))
        return nxt()

    with ToolRuntime() as own:
        own.tools.register(tool())
        own.events.on("tools/pre-execute", pre)
        signal = None if abort == "stop, no batch signal" else controller.signal
        future = own.tools.submit(ToolBatchInput(calls=(ToolCall("c1", "t", "{}"),), signal=signal))
        assert entered.wait(10.0)
        if abort == "batch":
            controller.abort()
        else:
            own.stop()
        result = future.result(10.0)
    assert seen == [True]
    assert result.results[0].result.error.info.code == "ABORTED_BEFORE_DISPATCH"


# -- observers and disposers ----------------------------------------------


def test_a_raising_tools_result_observer_is_logged_with_loguru_and_contained(rt: Any, library_logs: None) -> None:
    records: list[str] = []
    sink = logger.add(lambda message: records.append(str(message)), level="ERROR")
    try:
        rt.tools.register(tool())
        rt.events.on("tools/result", lambda ex, res: 1 / 0)
        batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "t", "{}"),)))
    finally:
        logger.remove(sink)
    assert not batch.results[0].result.is_error
    assert any("tools/result" in r and "ZeroDivisionError" in r for r in records)


def test_the_library_is_silent_until_the_application_enables_its_logs(rt: Any) -> None:
    records: list[str] = []
    sink = logger.add(lambda message: records.append(str(message)), level="DEBUG")
    try:
        rt.tools.register(tool())
        rt.events.on("tools/result", lambda ex, res: 1 / 0)
        rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "t", "{}"),)))
        logger.info("the application's own line")
    finally:
        logger.remove(sink)
    assert len(records) == 1 and "the application's own line" in records[0]


def test_every_effect_returns_an_idempotent_disposer_that_undoes_exactly_that_effect(rt: Any) -> None:
    agent = Agent("a")
    scoped = rt.tools.scope(agent)
    rt.tools.register(tool("g1"))
    rt.tools.register(tool("g2"))

    undo_listener = rt.events.on("tools/result", lambda ex, res: None)
    undo_listener()
    undo_listener()
    assert rt.events.listeners("tools/result") == ()

    undo_reg = scoped.register(tool("own"))
    assert scoped.get("own") is not None
    undo_reg()
    undo_reg()
    assert scoped.get("own") is None and rt.tools.get("g1") is not None

    first = scoped.restrict(ToolRestriction(deny=("g1",)))
    second = scoped.restrict(ToolRestriction(deny=("g2",)))
    first()
    first()
    assert scoped.get("g1") is not None and scoped.get("g2") is None  # only its own restriction lifted
    second()

    undo_guard = scoped.guard(lambda ex: "no")
    undo_guard()
    undo_guard()
    batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "g1", "{}"),), agent=agent))
    assert not batch.results[0].result.is_error

    executor = NativeExecutor()
    undo_exec = scoped.set_executor(executor)
    undo_exec()
    undo_exec()
    batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c2", "g1", "{}"),), agent=agent))
    assert not batch.results[0].result.is_error  # the global default serves it again
