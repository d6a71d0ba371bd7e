"""Sub-calls go through the whole pipeline (SPEC sections 5 and 7): ids
<outer>:ptc:<n>, the outer token as parent, the root call id, the frozen
binding-time schema; policies, guards and post-execute see them; images,
contexts and conclude_turn come back onto the outer result."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors import (
    Accept,
    Block,
    Deny,
    ImageBlock,
    ToolOutput,
    UserMessage,
    materialize,
    text,
)

from .helpers import batch, code_of, echo_tool, run_code, tool


def test_sub_calls_carry_their_ids_the_outer_token_the_root_call_id_and_the_frozen_schema(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    outer: list[Any] = []
    inner: list[Any] = []

    def record(execution: Any, next: Any) -> Any:
        (outer if execution.name == "run_code" else inner).append(execution)
        return next()

    rt.events.on("tools/pre-execute", record)
    result = run_code(rt, "await tools.echo(message='a')\nawait tools.echo(message='b')\nreturn 1", call_id="call-7")
    assert result.value["result"] == 1
    (run,) = outer
    assert [e.call_id for e in inner] == ["call-7:ptc:1", "call-7:ptc:2"]
    for execution in inner:
        assert execution.parent is run.token
        assert execution.root_call_id == "call-7"
        assert execution.schema == {
            "name": "echo",
            "description": "test tool echo",
            "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
        }
        assert execution.schema == materialize(execution.schema)  # frozen
        hash(execution.schema)
    assert [e.arguments for e in inner] == [{"message": "a"}, {"message": "b"}]


def test_a_pre_execute_deny_on_a_sub_call_becomes_an_exception_in_the_program(rt: Any, ptc: Any) -> None:
    ran: list[str] = []
    rt.tools.register(tool("delete", lambda args, ctx: ran.append("delete") or "gone"))

    def deny_delete(execution: Any, next: Any) -> Any:
        if execution.name == "delete":
            return Deny("deleting is not allowed here")
        return next()

    rt.events.on("tools/pre-execute", deny_delete)
    result = run_code(
        rt,
        "try:\n    await tools.delete()\nexcept ToolError as err:\n    return [str(err), err.code]\n",
    )
    assert result.value["result"] == ("deleting is not allowed here", None)
    assert ran == []


def test_guards_post_execute_and_the_result_event_apply_to_sub_calls(rt: Any, ptc: Any) -> None:
    rt.tools.register(tool("guarded", lambda args, ctx: "ran"))
    rt.tools.register(tool("blocked", lambda args, ctx: "secret"))
    rt.tools.register(
        tool(
            "edited", lambda args, ctx: "v", output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)])
        )
    )
    rt.tools.guard(lambda execution: "guard says no" if execution.name == "guarded" else None)

    def post(execution: Any, result: Any, next: Any) -> Any:
        if execution.name == "blocked":
            return Block([text("you may not see this")])
        if execution.name == "edited":
            return Accept(value="replaced")
        return next()

    rt.events.on("tools/post-execute", post)
    results: list[tuple[str, bool]] = []
    rt.events.on("tools/result", lambda execution, result: results.append((execution.call_id, result.is_error)))
    value = run_code(
        rt,
        "out = []\n"
        "for name in ['guarded', 'blocked']:\n"
        "    try:\n"
        "        await getattr(tools, name)()\n"
        "    except ToolError as err:\n"
        "        out.append(str(err))\n"
        "out.append(await tools.edited())\n"
        "return out",
    ).value["result"]
    assert value == ("guard says no", "you may not see this", "replaced")
    assert results == [("c1:ptc:1", True), ("c1:ptc:2", True), ("c1:ptc:3", False), ("c1", False)]


def test_images_and_contexts_of_sub_results_are_deferred_onto_the_outer_result(rt: Any, ptc: Any) -> None:
    image = ImageBlock(data="aGk=", mime_type="image/png")

    def shoot(args: Any, ctx: Any) -> str:
        ctx.defer_context(UserMessage((text("from the body"),), source="shoot"))
        return "shot"

    rt.tools.register(
        tool("shoot", shoot, output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v), image]))
    )
    result = run_code(rt, "return await tools.shoot()")
    assert result.value["result"] == "shot"
    assert result.additional_contexts == (
        UserMessage((image,), source="run_code", meta={"sub_call_id": "c1:ptc:1", "tool": "shoot"}),
        UserMessage((text("from the body"),), source="shoot"),
    )


def test_a_nested_conclude_turn_is_forwarded_only_from_a_success(rt: Any, ptc: Any) -> None:
    def finish(args: Any, ctx: Any) -> str:
        ctx.conclude_turn()
        if args.get("fail"):
            raise ValueError("failed after concluding")
        return "done"

    rt.tools.register(tool("finish", finish, parameters={"fail": {"type": "boolean"}}))
    failed = rt.tools.execute(batch("try:\n    await tools.finish(fail=True)\nexcept ToolError:\n    pass\nreturn 1"))
    assert not failed.results[0].result.is_error and not failed.concluded
    succeeded = rt.tools.execute(batch("return await tools.finish()"))
    assert succeeded.results[0].result.concludes_turn and succeeded.concluded


def test_a_tool_unregistered_after_binding_fails_unknown_tool_in_the_program(rt: Any, ptc: Any) -> None:
    holder: list[Any] = []
    dispose = rt.tools.register(echo_tool())

    def drop(args: Any, ctx: Any) -> str:
        holder[0]()
        return "dropped"

    holder.append(dispose)
    rt.tools.register(tool("drop", drop, concurrent=False))
    result = run_code(
        rt,
        "await tools.drop()\ntry:\n    await tools.echo(message='x')\nexcept ToolError as err:\n    return err.code",
    )
    assert result.value["result"] == "UNKNOWN_TOOL"


def test_an_async_tool_body_works_as_a_sub_call(rt: Any, ptc: Any) -> None:
    async def later(args: Any, ctx: Any) -> str:
        return "async " + args["message"]

    rt.tools.register(tool("later", later, parameters={"message": {"type": "string"}}))
    assert run_code(rt, "return await tools.later(message='hi')").value["result"] == "async hi"


def test_the_program_gets_the_value_even_when_a_policy_replaced_the_content(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    rt.events.on("tools/post-execute", lambda e, r, next: Accept(content=[text("short")]))
    result = run_code(rt, "return await tools.echo(message='full value')")
    assert code_of(result) is None
    assert result.value["result"] == {"message": "full value"}


@pytest.mark.parametrize("asker", ["listener", "requires_approval"])
def test_an_ask_on_a_sub_call_goes_to_the_approval_service_with_the_sub_call_id(rt: Any, ptc: Any, asker: str) -> None:
    import dataclasses

    from dsh_actors import Agent, Ask

    if asker == "listener":
        rt.tools.register(echo_tool())
        rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="check") if execution.parent else next())
        reason = "check"
    else:  # the tool's definition asks, through the same pipeline
        rt.tools.register(dataclasses.replace(echo_tool(), requires_approval=True))
        reason = None  # (the definition's Ask has no reason of its own)
    asked: list[tuple[str, str, str | None]] = []

    def service(request: Any) -> str:
        asked.append((request.call_id, request.tool_name, request.reason))
        return "allowed-once" if request.arguments["message"] == "yes" else "rejected"

    rt.approvals.set(service)
    heard: list[tuple[str, str | None, str]] = []  # (tools/approval: sub-calls route approvals as any call)
    rt.events.on("tools/approval", lambda execution, ask, answer: heard.append((execution.call_id, ask.reason, answer)))
    result = run_code(
        rt,
        "ok = await tools.echo(message='yes')\n"
        "try:\n    await tools.echo(message='no')\nexcept ToolError as err:\n    return [ok, str(err)]",
        agent=Agent("a"),
    )
    assert result.value["result"] == ({"message": "yes"}, 'the user rejected tool "echo"')
    assert asked == [("c1:ptc:1", "echo", reason), ("c1:ptc:2", "echo", reason)]  # run_code itself is not asked
    assert heard == [("c1:ptc:1", reason, "allowed-once"), ("c1:ptc:2", reason, "rejected")]


class _Clock:
    """The run's clock (``executors.ptc.run``'s ``time``), moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _approving(rt: Any, monkeypatch: Any) -> _Clock:
    """A 2 s executor whose ``echo`` requires approval, its runs on a
    clock of the test's; ``slow`` moves that clock on by 2.5 s."""
    import dataclasses

    from executors.ptc import run as run_module

    from .helpers import install

    install(rt, timeout_ms=2000)
    clock = _Clock()
    monkeypatch.setattr(run_module, "time", clock)
    rt.tools.register(dataclasses.replace(echo_tool(), requires_approval=True))

    def slow(args: Any, ctx: Any) -> str:
        clock.now += 2.5
        return "slow"

    rt.tools.register(tool("slow", slow))
    return clock


def test_the_time_a_person_takes_to_answer_a_sub_calls_approval_does_not_count_against_the_timeout(
    rt: Any, monkeypatch: Any
) -> None:
    # As a tool's own timeout_ms (policies.timeout) does not count its
    # approval: the program's deadline stands still while a person decides,
    # and runs on once they have answered.
    from dsh_actors import Agent

    clock = _approving(rt, monkeypatch)

    def service(request: Any) -> str:
        clock.now += 60.0  # a minute to decide; the program has 2 s
        return "allowed-once"

    rt.approvals.set(service)
    result = run_code(rt, "return await tools.echo(message='yes')", agent=Agent("a"))
    assert result.value["result"] == {"message": "yes"}
    late = run_code(rt, "await tools.echo(message='yes')\nreturn await tools.slow()", agent=Agent("a"))
    assert code_of(late) == "CODE_RUN_FAILED"
    assert late.error.message.startswith("code run failed (timeout): the program did not finish within 2000 ms")


def test_a_sub_call_asked_about_with_no_one_to_answer_stops_the_clock_only_until_it_settles(
    rt: Any, monkeypatch: Any
) -> None:
    # No approval service: the call is denied at once, and the time after it
    # counts again (the deadline moves on when the asked call settles).
    from dsh_actors import Agent

    _approving(rt, monkeypatch)
    code = "try:\n    await tools.echo(message='yes')\nexcept ToolError:\n    pass\nreturn await tools.slow()"
    result = run_code(rt, code, agent=Agent("a"))
    assert code_of(result) == "CODE_RUN_FAILED"
    assert result.error.message.startswith("code run failed (timeout): the program did not finish within 2000 ms")


def test_the_clock_stands_still_for_an_ask_a_listener_subscribed_after_the_executor_makes(
    rt: Any, monkeypatch: Any
) -> None:
    # The pause follows the request the pipeline makes (tools/approval-request),
    # not a listener of the executor's inside the waterfall: a listener
    # prepended later (outside it) that turns Allow into Ask is asked about
    # as any Ask, and the person's minute does not count.
    from dsh_actors import Agent, Ask

    clock = _approving(rt, monkeypatch)
    rt.tools.register(tool("careful", lambda args, ctx: "done"))

    def outer(execution: Any, next_: Any) -> Any:
        decision = next_()
        return Ask(reason="check") if execution.name == "careful" else decision

    rt.events.on("tools/pre-execute", outer, prepend=True)

    def service(request: Any) -> str:
        clock.now += 60.0  # a minute to decide; the program has 2 s
        return "allowed-once"

    rt.approvals.set(service)
    result = run_code(rt, "return await tools.careful()", agent=Agent("a"))
    assert code_of(result) is None
    assert result.value["result"] == "done"


def test_the_clock_runs_on_for_an_ask_a_listener_subscribed_after_the_executor_allows(
    rt: Any, monkeypatch: Any
) -> None:
    # A listener prepended later that turns the tool's Ask into Allow: no
    # one is asked, so nothing stands still (the call's own 2.5 s count).
    import dataclasses

    from dsh_actors import Agent, Allow, Ask

    clock = _approving(rt, monkeypatch)

    def slow(args: Any, ctx: Any) -> str:
        clock.now += 2.5
        return "slow"

    rt.tools.register(dataclasses.replace(tool("careful", slow), requires_approval=True))

    def outer(execution: Any, next_: Any) -> Any:
        decision = next_()
        return Allow() if type(decision) is Ask else decision

    rt.events.on("tools/pre-execute", outer, prepend=True)
    asked: list[str] = []
    rt.approvals.set(lambda request: asked.append(request.call_id) or "allowed-once")
    result = run_code(rt, "return await tools.careful()", agent=Agent("a"))
    assert asked == []
    assert code_of(result) == "CODE_RUN_FAILED"
    assert result.error.message.startswith("code run failed (timeout): the program did not finish within 2000 ms")


def test_a_bound_executor_adds_no_pre_execute_waterfall_to_calls_that_have_no_listener(
    rt: Any, ptc: Any, monkeypatch: Any
) -> None:
    # (Its approval pause observes tools/approval-request: it once prepended
    # a pre-execute listener, which made every call of the runtime, program
    # or not, run the waterfall the pipeline skips when none is subscribed.)
    from dsh_actors.events import EventBus

    rt.tools.register(echo_tool())
    waterfalls: list[str] = []
    waterfall = EventBus.waterfall

    def counting(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        waterfalls.append(name)
        return waterfall(self, name, *args, **kwargs)

    monkeypatch.setattr(EventBus, "waterfall", counting)
    # Neither run_code nor its sub-call runs the waterfall.
    assert run_code(rt, "return await tools.echo(message='sub')").value["result"] == {"message": "sub"}
    assert waterfalls.count("tools/pre-execute") == 0
    assert rt.events.listeners("tools/pre-execute") == ()
    # (The spy sees them once a listener is subscribed: one each.)
    rt.events.on("tools/pre-execute", lambda execution, next_: next_())
    assert run_code(rt, "return await tools.echo(message='sub')").value["result"] == {"message": "sub"}
    assert waterfalls.count("tools/pre-execute") == 2


def test_a_value_too_deep_to_send_fails_only_that_call(rt: Any, ptc: Any) -> None:
    deep: Any = "leaf"
    for _ in range(256):  # as deep as the core allows: the result envelope is one level more
        deep = [deep]
    rt.tools.register(tool("deep", lambda args, ctx: deep))
    result = run_code(rt, "try:\n    await tools.deep()\nexcept ToolError as err:\n    return str(err)")
    assert result.value["result"].startswith("the value of tool 'deep' cannot be sent to the program")


def test_a_deferred_approval_on_a_sub_call_fails_it_in_the_program_and_the_run_goes_on(rt: Any, ptc: Any) -> None:
    from dsh_actors import Agent, Ask

    rt.tools.register(echo_tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="check") if execution.parent else next())
    rt.approvals.set(lambda request: "deferred")
    result = run_code(
        rt,
        "try:\n    await tools.echo(message='later')\nexcept ToolError as err:\n"
        "    return [str(err), err.code, err.error_name]",
        agent=Agent("a"),
    )
    assert code_of(result) is None
    assert result.value["result"] == (
        'tool "echo" requires approval, but the approval service deferred it and a nested call '
        "cannot wait for a decision (only a batch suspends): call the tool as a tool call of its own, not from "
        "code or another tool, for a person to decide",
        None,  # a denial: no code (docs/reference.md, sections 5 and 11), as the guide tells the model
        None,
    )
    (guide,) = ptc.sections
    assert "`err.code` the error code or None (a call that a policy or the approval refused or deferred)" in (
        guide.content
    )
