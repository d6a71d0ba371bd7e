"""What a call runs with is what holds when its body starts (issue 22,
items 3 and 4): a change to the registry or to the pre-execute listeners
made before a call's body starts applies to that call, whether it was
queued, prepared ahead or not started yet; a running call keeps what it
started with. An abort replaces only an outcome whose body settled after
it; a call cancelled before its body started is ABORTED_BEFORE_DISPATCH
whatever kind of listener ran; a blocking nested batch on the runtime's own
loop fails at once.

Threads are synchronised with Events and Barriers; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import (
    AbortController,
    Agent,
    Ask,
    Deny,
    LogStep,
    Session,
    ToolBatchInput,
    ToolOutput,
    ToolRestriction,
    text,
)

from .helpers import GUARD, Timeline, call, calls, code_of, make_tool, must, started_runtime

CHANGES = ("guard", "deny-listener", "unregister", "restrict", "exclusive-replacement")


def _message(result: Any) -> str | None:
    return result.error.message if result.is_error else None


@pytest.mark.parametrize("logged", [False, True], ids=["unlogged", "logged"])
@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("size", [4, 6])
def test_a_change_made_while_earlier_calls_run_applies_to_every_call_whose_body_had_not_started(
    change: str, logged: bool, size: int
) -> None:
    with started_runtime() as rt:
        timeline = Timeline()
        both_running = threading.Barrier(3, timeout=GUARD)
        release = threading.Event()

        def old_body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                if args["i"] < 2:
                    both_running.wait()
                    must(release, "the test to release the first two calls")
            return f"v{args['i']}"

        def new_body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                return f"new{args['i']}"

        dispose_old = rt.tools.register(make_tool("t", old_body))
        agent = Agent("a", session=Session() if logged else None)
        batch = ToolBatchInput(
            calls=tuple(calls(*["t"] * size)),
            agent=agent,
            log=LogStep(turn=1, step=1) if logged else None,
            max_parallel_tool_calls=2,
        )
        future = rt.tools.submit(batch)
        try:
            both_running.wait()  # c0 and c1 run; the calls behind them may be prepared ahead
            if change == "guard":
                rt.tools.guard(lambda execution: "late guard" if execution.arguments["i"] >= 2 else None)
            elif change == "deny-listener":

                def deny(execution: Any, next_: Any) -> Any:
                    return Deny("late listener") if execution.arguments["i"] >= 2 else next_()

                rt.events.on("tools/pre-execute", deny)
            elif change == "unregister":
                dispose_old()
            elif change == "restrict":
                rt.tools.scope(agent).restrict(ToolRestriction(deny=("t",)))
            else:
                dispose_old()
                rt.tools.register(make_tool("t", new_body, classifier=None))  # every call exclusive
        finally:
            release.set()
        result = future.result(GUARD)
        values = [r.result for r in result.results]
        # The running calls keep what they started with.
        assert [v.value for v in values[:2]] == ["v0", "v1"], values[:2]
        later = values[2:]
        later_ids = [f"c{i}" for i in range(2, size)]
        if change == "guard":
            assert [_message(v) for v in later] == ["late guard"] * (size - 2)
        elif change == "deny-listener":
            assert [_message(v) for v in later] == ["late listener"] * (size - 2)
        elif change in ("unregister", "restrict"):
            assert [code_of(v) for v in later] == ["UNKNOWN_TOOL"] * (size - 2)
        else:
            assert [v.value for v in later] == [f"new{i}" for i in range(2, size)]
            # Each replacement call is a barrier: it overlaps no other body.
            for call_id in later_ids:
                for other in timeline.starts:
                    if other != call_id:
                        assert not timeline.overlaps(call_id, other), (call_id, other, timeline.starts, timeline.ends)
        if change != "exclusive-replacement":
            assert not any(call_id in timeline.starts for call_id in later_ids), timeline


def _rendering(rendered: dict[str, threading.Event]) -> ToolOutput:
    """Text output whose render (which runs after the body returned) sets
    ``rendered[call id]``."""

    def render(args: Any, value: Any) -> Any:
        event = rendered.get(f"c{args['i']}")
        if event is not None:
            event.set()
        return [text(value)]

    return ToolOutput(schema={"type": "string"}, render=render)


@pytest.mark.parametrize("logged", [False, True], ids=["unlogged", "logged"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_abort_keeps_the_success_of_a_body_that_returned_before_it_while_an_earlier_call_still_runs(
    kind: str, logged: bool
) -> None:
    with started_runtime() as rt:
        controller = AbortController()
        rendered = {"c1": threading.Event()}
        first_started = threading.Event()
        release = threading.Event()

        if kind == "sync":

            def body(args: Any, ctx: Any) -> str:
                if args["i"] == 0:
                    first_started.set()
                    must(release, "the test to release call 0")
                return f"v{args['i']}"

        else:

            async def body(args: Any, ctx: Any) -> str:  # type: ignore[misc]
                if args["i"] == 0:
                    first_started.set()
                    await asyncio.Event().wait()  # until the abort cancels it
                return f"v{args['i']}"

        rt.tools.register(
            make_tool("t", body, output=_rendering(rendered))  # type: ignore[arg-type]
        )
        agent = Agent("a", session=Session() if logged else None)
        batch = ToolBatchInput(
            calls=tuple(calls("t", "t")),
            agent=agent,
            log=LogStep(turn=1, step=1) if logged else None,
            signal=controller.signal,
        )
        future = rt.tools.submit(batch)
        try:
            must(first_started, "call 0's body to start")
            must(rendered["c1"], "call 1's body to return (its value is rendered after that)")
            controller.abort("after call 1 returned")
        finally:
            release.set()
        result = future.result(GUARD)
        assert code_of(result.results[0].result) == "ABORTED"
        assert result.results[1].result.value == "v1", result.results[1].result


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_call_whose_pre_execute_listener_is_cancelled_by_the_abort_is_aborted_before_dispatch(kind: str) -> None:
    with started_runtime() as rt:
        controller = AbortController()
        entered = threading.Event()
        ran: list[str] = []

        def body(args: Any, ctx: Any) -> str:
            ran.append(ctx.call_id)
            return "ran"

        rt.tools.register(make_tool("t", body))
        if kind == "sync":

            def listener(execution: Any, next_: Any) -> Any:
                entered.set()
                execution.signal.wait(GUARD)
                return next_()

        else:

            async def listener(execution: Any, next_: Any) -> Any:  # type: ignore[misc]
                entered.set()
                await asyncio.Event().wait()  # until the abort cancels it
                return next_()

        rt.events.on("tools/pre-execute", listener)
        future = rt.tools.submit(ToolBatchInput(calls=tuple(calls("t")), signal=controller.signal))
        must(entered, "the pre-execute listener to run")
        controller.abort("while the listener ran")
        result = future.result(GUARD)
        assert code_of(result.results[0].result) == "ABORTED_BEFORE_DISPATCH"
        assert ran == []


def test_a_blocking_nested_batch_from_an_async_body_on_the_runtimes_own_loop_fails_at_once() -> None:
    with started_runtime() as rt:

        async def inner(args: Any, ctx: Any) -> str:
            return "inner"

        async def outer(args: Any, ctx: Any) -> str:
            nested = rt.tools.execute(ToolBatchInput(calls=tuple(calls("inner"))))
            return str(nested.results[0].result.value)

        rt.tools.register(make_tool("inner", inner))
        rt.tools.register(make_tool("outer", outer))
        result = rt.tools.submit(ToolBatchInput(calls=tuple(calls("outer")))).result(GUARD)
        outcome = result.results[0].result
        assert outcome.is_error
        assert "execute_async" in outcome.error.message, outcome.error.message


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(min_value=2, max_value=9),
    cap=st.integers(min_value=1, max_value=4),
    logged=st.booleans(),
    change=st.sampled_from(CHANGES),
    data=st.data(),
)
def test_a_change_made_from_a_running_body_applies_exactly_to_the_calls_whose_bodies_start_after_it(
    size: int, cap: int, logged: bool, change: str, data: Any
) -> None:
    """Random batches at a random cap, logged or not; the body of a random
    call makes one change (as a composite tool might). Every body that
    started before the change began ran the old tool; every call whose body
    never started gets the change; an exclusive replacement's calls overlap
    nothing. The schedule's invariants are asserted after every step
    (conftest).

    A body that starts after the change may still run the old tool: the
    runtime's start is when a call actor takes the call (reference section
    6, "What holds when a body starts"), and a change can land between that
    and the body's first line. The test cannot see the take, so it accepts
    either for those calls; the deterministic tests above pin that calls
    still queued or prepared when the change lands get it."""
    trigger = data.draw(st.integers(min_value=0, max_value=size - 1), label="trigger")
    with started_runtime() as rt:
        timeline = Timeline()
        agent = Agent("a", session=Session() if logged else None)
        window: dict[str, int] = {}
        disposers: dict[str, Any] = {}

        def new_body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                return f"new{args['i']}"

        def make_change() -> None:
            if change == "guard":
                rt.tools.guard(lambda execution: "late guard")
            elif change == "deny-listener":
                rt.events.on("tools/pre-execute", lambda execution, next_: Deny("late listener"))
            elif change == "unregister":
                disposers["old"]()
            elif change == "restrict":
                rt.tools.scope(agent).restrict(ToolRestriction(deny=("t",)))
            else:
                disposers["old"]()
                rt.tools.register(make_tool("t", new_body, classifier=None))

        def old_body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                if args["i"] == trigger:
                    with timeline.lock:
                        window["begin"] = timeline._tick()
                    make_change()
                    with timeline.lock:
                        window["end"] = timeline._tick()
            return f"v{args['i']}"

        disposers["old"] = rt.tools.register(make_tool("t", old_body))
        batch = ToolBatchInput(
            calls=tuple(calls(*["t"] * size)),
            agent=agent,
            log=LogStep(turn=1, step=1) if logged else None,
            max_parallel_tool_calls=cap,
        )
        result = rt.tools.submit(batch).result(GUARD)
        assert "end" in window, "the change was never made"
        for i, item in enumerate(result.results):
            outcome = item.result
            call_id = f"c{i}"
            started = timeline.starts.get(call_id)
            if started is not None and started < window["begin"]:
                assert outcome.value == f"v{i}", (call_id, outcome, timeline)
                continue
            if started is not None and started < window["end"]:
                # Its body started while the change was being made: either.
                assert outcome.value in (f"v{i}", f"new{i}"), (call_id, outcome)
                continue
            if started is not None and outcome.value == f"v{i}":
                # Taken to run before the change, its body's first line after.
                continue
            if change == "guard":
                assert started is None and _message(outcome) == "late guard", (call_id, outcome)
            elif change == "deny-listener":
                assert started is None and _message(outcome) == "late listener", (call_id, outcome)
            elif change in ("unregister", "restrict"):
                assert started is None and code_of(outcome) == "UNKNOWN_TOOL", (call_id, outcome)
            elif started is None and code_of(outcome) == "UNKNOWN_TOOL":
                # The replacement is two writes (unregister, then register):
                # a call prepared between them met no tool, and ran nothing.
                continue
            else:
                assert outcome.value == f"new{i}", (call_id, outcome)
                for other in timeline.starts:
                    if other != call_id:
                        assert not timeline.overlaps(call_id, other), (call_id, other, timeline)


def test_a_call_found_stale_in_the_mailbox_starts_before_a_later_call_started_on_a_loop() -> None:
    """Starts are decided in model order: c1 waits in the work mailbox (the
    one call actor runs c0) when c2's pre-execute listener replaces c1's
    tool with an exclusive one. c1 is stale; c2, prepared under the change,
    must not start before c1 has been prepared again (now a barrier) and
    has run."""
    with started_runtime(max_call_actors=1) as rt:
        timeline = Timeline()
        c0_running = threading.Event()
        release_c0 = threading.Event()
        c2_prepared_again = threading.Event()

        def old_body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                if args["i"] == 0:
                    c0_running.set()
                    must(release_c0, "the test to release call 0")
            return f"v{args['i']}"

        def new_body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                return f"new{args['i']}"

        async def async_body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                return f"a{args['i']}"

        dispose_old = rt.tools.register(make_tool("s", old_body))
        rt.tools.register(make_tool("a", async_body))  # type: ignore[arg-type]
        replaced: list[bool] = []

        def replace_on_c2(execution: Any, next_: Any) -> Any:
            if execution.call_id == "c2":
                if not replaced:
                    replaced.append(True)
                    must(c0_running, "call 0 to run")
                    dispose_old()
                    rt.tools.register(make_tool("s", new_body, classifier=None))  # exclusive now
                else:
                    c2_prepared_again.set()
            return next_()

        rt.events.on("tools/pre-execute", replace_on_c2)
        batch = ToolBatchInput(calls=tuple(calls("s", "s", "a")), max_parallel_tool_calls=3)
        future = rt.tools.submit(batch)
        try:
            must(c2_prepared_again, "call 2 to be prepared after the change")
        finally:
            release_c0.set()
        result = future.result(GUARD)
        assert [r.result.value for r in result.results] == ["v0", "new1", "a2"], result.results
        # c1 is exclusive now: c2's body starts after c1's ended.
        assert timeline.ends["c1"] < timeline.starts["c2"], (timeline.starts, timeline.ends)


@pytest.mark.parametrize("logged", [False, True], ids=["unlogged", "logged"])
def test_a_call_prepared_again_against_a_replacement_has_its_arguments_settled_against_the_replacement(
    logged: bool,
) -> None:
    """c2 sends ``"limit": null``. The tool's schema does not accept null
    for ``limit``, so the null is dropped as c2 meets it; the tool is then
    replaced, before c2's body starts, by one whose ``limit`` takes any JSON
    value, null included: c2
    runs the replacement with the model's arguments settled against it."""
    with started_runtime() as rt:
        both_running = threading.Barrier(3, timeout=GUARD)
        release = threading.Event()
        seen: dict[int, Any] = {}

        def old_body(args: Any, ctx: Any) -> str:
            if args["i"] < 2:
                both_running.wait()
                must(release, "the test to release the first two calls")
            seen[args["i"]] = ("old", dict(args))
            return "old"

        def new_body(args: Any, ctx: Any) -> str:
            seen[args["i"]] = ("new", dict(args))
            return "new"

        def parameters(limit: str) -> dict[str, Any]:
            return {"i": {"type": "integer", "required": True}, "limit": {"type": limit}}

        c2_met_old = threading.Event()

        def old_classifier(args: Any) -> bool:
            if args["i"] == 2:
                c2_met_old.set()  # (after its arguments were settled against the old tool)
            return True

        dispose_old = rt.tools.register(
            make_tool("t", old_body, parameters=parameters("integer"), classifier=old_classifier)
        )
        agent = Agent("a", session=Session() if logged else None)
        batch = ToolBatchInput(
            calls=(call(0, "t"), call(1, "t"), call(2, "t", limit=None)),
            agent=agent,
            log=LogStep(turn=1, step=1) if logged else None,
            max_parallel_tool_calls=2,
        )
        future = rt.tools.submit(batch)
        try:
            both_running.wait()  # c0 and c1 run
            must(c2_met_old, "call 2 to be classified under the old tool")
            dispose_old()
            rt.tools.register(make_tool("t", new_body, parameters=parameters("json")))
        finally:
            release.set()
        result = future.result(GUARD)
        assert [r.result.value for r in result.results] == ["old", "old", "new"], result.results
        assert seen[2] == ("new", {"i": 2, "limit": None}), seen


class _Budget:
    """What a work mailbox asks of the runtime's dispatcher: here, a server
    is asked for and counted (the test plays the servers)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.wanting: dict[Any, None] = {}

    def want_locked(self, mailbox: Any) -> list[Any]:
        self.requests += 1
        return []

    def send(self, sends: Any) -> None:
        pass

    def waits_for(self, mailbox: Any) -> bool:
        return False

    def yields(self, mailbox: Any) -> bool:
        return False

    def opened(self, mailbox: Any) -> None:
        pass

    def closed_mailbox_locked(self, mailbox: Any) -> None:
        pass


def test_nothing_behind_a_stale_call_starts_before_the_batch_has_it_back() -> None:
    """A server finds c1 stale and sends it back (``Returned``); until the
    batch has that message, a call put behind it (prepared under what holds
    now, so not stale) is refused, and no server takes one: it would start
    before c1 is prepared again."""
    from dsh_actors.scheduling.inbox import BatchInbox
    from dsh_actors.scheduling.messages import Returned
    from dsh_actors.scheduling.pool import WorkMailbox

    stale_calls = {"c1"}
    inbox = BatchInbox(None)
    budget = _Budget()
    mailbox = WorkMailbox(4, budget, inbox, lambda call: call in stale_calls)  # type: ignore[arg-type]
    mailbox.put("c1")  # type: ignore[arg-type]
    mailbox.arrive()
    assert mailbox.take(wait=False) is None  # c1 was stale: it went back
    returned = inbox.get()
    assert type(returned) is Returned and returned.calls == ("c1",)
    queued = mailbox.put("c2")  # type: ignore[arg-type]
    assert mailbox.take(wait=False) is None, "c2 started before the batch had c1 back"
    assert queued is False  # (the batch prepares c2 again after c1)
    mailbox.resume()  # the batch has c1 back
    assert mailbox.put("c1") is True  # type: ignore[arg-type]
    stale_calls.clear()
    assert mailbox.put("c2") is True  # type: ignore[arg-type]
    assert [mailbox.take(wait=False), mailbox.take(wait=False)] == ["c1", "c2"]
    mailbox.assert_invariants()


def test_a_server_that_leaves_for_another_batch_passes_its_wake_up_to_one_idle_beside_it() -> None:
    """Two servers idle on a mailbox; a put wakes one, which leaves for a
    batch that waits with fewer call actors (``Dispatcher.yields``). The
    other must take the call: the put's wake-up was the only one, and it
    was lost with the server that left (the call stayed queued beside an
    idle server, and the batch waited forever; about one batch in a
    thousand under a random concurrent load)."""
    from dsh_actors.scheduling.inbox import BatchInbox
    from dsh_actors.scheduling.pool import LEAVE, WorkMailbox

    both_idle = threading.Event()

    class Waiting(_Budget):
        def __init__(self) -> None:
            super().__init__()
            self.wanting = {"another batch": None}
            self.idle_checks = 0
            self.yielded = False

        def waits_for(self, mailbox: Any) -> bool:
            # (Asked under the mailbox's lock as a server is about to idle.)
            self.idle_checks += 1
            if self.idle_checks == 2:
                both_idle.set()
            return False

        def yields(self, mailbox: Any) -> bool:
            first, self.yielded = not self.yielded, True
            return first  # the first server woken leaves; the next stays

    budget = Waiting()
    mailbox = WorkMailbox(4, budget, BatchInbox(None))  # type: ignore[arg-type]
    with budget.lock:
        mailbox.servers = mailbox.spare = 2  # two servers asked for (as put() counts them)
    taken: list[Any] = []
    done = [threading.Event(), threading.Event()]

    def serve(index: int) -> None:
        mailbox.arrive()
        taken.append(mailbox.take())
        done[index].set()

    servers = [threading.Thread(target=serve, args=(i,), daemon=True) for i in range(2)]
    for thread in servers:
        thread.start()
    try:
        must(both_idle, "both servers idle")
        mailbox.put("c1")  # type: ignore[arg-type]
        settled = all(event.wait(GUARD) for event in done)
        assert settled, f"a server still waits while c1 is queued: {mailbox} (taken: {taken})"
        assert sorted(map(str, taken)) == sorted(map(str, [LEAVE, "c1"]))
    finally:
        mailbox.close()  # (a server still waiting leaves)
        for thread in servers:
            thread.join(GUARD)


class _IdleSignal(_Budget):
    """A budget that says when a server is about to wait idle (asked under
    the mailbox's lock just before it counts itself idle)."""

    def __init__(self, idle: threading.Event) -> None:
        super().__init__()
        self.idle = idle

    def waits_for(self, mailbox: Any) -> bool:
        self.idle.set()
        return False


def test_a_put_wakes_a_server_idle_on_the_mailbox_at_once() -> None:
    """A call put while a server waits idle on the mailbox wakes it at once
    (the step that put it goes on preparing the next calls meanwhile), and
    asks the dispatcher for no other server."""
    from dsh_actors.scheduling.inbox import BatchInbox
    from dsh_actors.scheduling.pool import WorkMailbox

    idle = threading.Event()
    budget = _IdleSignal(idle)
    mailbox = WorkMailbox(4, budget, BatchInbox(None))  # type: ignore[arg-type]
    with budget.lock:
        mailbox.servers = mailbox.spare = 1  # one server asked for (as put() counts it)
    taken: list[Any] = []
    done = threading.Event()

    def serve() -> None:
        mailbox.arrive()
        taken.append(mailbox.take())
        done.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        must(idle, "the server to wait idle")
        assert mailbox.put("c1") is True  # type: ignore[arg-type]
        must(done, "the idle server to take c1")
        assert taken == ["c1"]
        assert budget.requests == 0  # (a server is there: none is asked for)
        mailbox.assert_invariants()
    finally:
        mailbox.close()
        server.join(GUARD)


def test_a_put_asks_at_once_for_a_server_when_none_is_there() -> None:
    """A call put while no server serves the mailbox asks the dispatcher
    for one at once (nobody would take it otherwise)."""
    from dsh_actors.scheduling.inbox import BatchInbox
    from dsh_actors.scheduling.pool import WorkMailbox

    budget = _Budget()
    mailbox = WorkMailbox(4, budget, BatchInbox(None))  # type: ignore[arg-type]
    assert mailbox.put("c1") is True  # type: ignore[arg-type]
    assert budget.requests == 1
    mailbox.close()


def test_a_call_queued_before_an_async_call_runs_under_what_holds_when_a_call_actor_takes_it() -> None:
    """Calls start in model order, each under what holds when it starts: c1
    waits in the work mailbox (the one call actor runs c0) when c2, an
    async call, is prepared. c2 does not start ahead of c1 as a flight: it
    waits behind c1, so a guard added after c2 was prepared, before a call
    actor takes c1, applies to c1 (and c2 still runs after it)."""
    with started_runtime(max_call_actors=1) as rt:
        timeline = Timeline()
        c0_running, release_c0, c2_prepared = threading.Event(), threading.Event(), threading.Event()

        def blocking(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                c0_running.set()
                must(release_c0, "the test to release call 0")
            return "c0"

        def plain(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                return "c1"

        async def async_body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                return "c2"

        rt.tools.register(make_tool("blocking", blocking))
        rt.tools.register(make_tool("plain", plain))
        rt.tools.register(make_tool("a", async_body))  # type: ignore[arg-type]

        def note_c2(execution: Any, next_: Any) -> Any:
            if execution.call_id == "c2":
                c2_prepared.set()
            return next_()

        rt.events.on("tools/pre-execute", note_c2)
        future = rt.tools.submit(
            ToolBatchInput(calls=tuple(calls("blocking", "plain", "a")), max_parallel_tool_calls=3)
        )
        try:
            must(c0_running, "call 0 to run")
            must(c2_prepared, "call 2 to be prepared (call 1 is queued before it)")
            rt.tools.guard(lambda execution: "late guard" if execution.name == "plain" else None)
        finally:
            release_c0.set()
        result = future.result(GUARD)
        assert [r.result.is_error for r in result.results] == [False, True, False], result.results
        assert "late guard" in (_message(result.results[1].result) or "")
        assert "c1" not in timeline.starts  # its body never ran
        assert timeline.ends["c0"] <= timeline.starts["c2"], (timeline.starts, timeline.ends)


@pytest.mark.parametrize("hook", ["sync listener", "async listener", "approval service"])
def test_an_async_body_started_is_not_held_behind_a_later_calls_pre_execute_hook(hook: str) -> None:
    """c0's async body starts when c0 is dispatched, before c1's
    pre-execute listener or approval service runs: a hook that waits (for a
    person, say) never holds an earlier body back. Here c1's hook waits for
    c0's body, which would never come if c0's flight waited for the step
    to end."""
    from dsh_actors import Ask

    with started_runtime() as rt:
        c0_running = threading.Event()
        saw: list[bool] = []

        async def async_body(args: Any, ctx: Any) -> str:
            c0_running.set()
            return "c0"

        rt.tools.register(make_tool("a", async_body))  # type: ignore[arg-type]
        rt.tools.register(make_tool("s", lambda args, ctx: "c1"))
        if hook == "sync listener":

            def listener(execution: Any, next_: Any) -> Any:
                if execution.call_id == "c1":
                    saw.append(c0_running.wait(GUARD))
                return next_()

            rt.events.on("tools/pre-execute", listener)
        elif hook == "async listener":

            async def alistener(execution: Any, next_: Any) -> Any:
                if execution.call_id == "c1":
                    saw.append(await asyncio.to_thread(c0_running.wait, GUARD))
                return await next_()

            rt.events.on("tools/pre-execute", alistener)
        else:
            rt.events.on(
                "tools/pre-execute", lambda execution, next_: Ask("ok?") if execution.call_id == "c1" else next_()
            )

            def service(request: Any) -> str:
                saw.append(c0_running.wait(GUARD))
                return "allowed-once"

            rt.approvals.set(service)
        result = rt.tools.execute(ToolBatchInput(calls=tuple(calls("a", "s")), agent=Agent("approving")))
        assert [r.result.value for r in result.results] == ["c0", "c1"], result.results
        assert saw == [True]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("returns", ["the body's result", "its own success", "no body"])
def test_a_wrapper_holding_a_result_past_the_abort_keeps_the_bodys_success_only(kind: str, returns: str) -> None:
    """The abort is held against the moment the body settled, however long
    a tools/execute wrapper keeps its result: the body's own success stays
    a success; a success the wrapper made (after the abort) is replaced,
    ABORTED if the body ran, ABORTED_BEFORE_DISPATCH if it did not."""
    from dsh_actors import ToolExecutionSuccess

    with started_runtime() as rt:
        controller = AbortController()
        held, ran = threading.Event(), []

        if kind == "sync":

            def body(args: Any, ctx: Any) -> str:
                ran.append(True)
                return "from the body"

        else:

            async def body(args: Any, ctx: Any) -> str:  # type: ignore[misc]
                ran.append(True)
                return "from the body"

        def wrapper(execution: Any, next_: Any) -> Any:
            result = None if returns == "no body" else next_()
            held.set()
            must_fire = execution.signal.wait(GUARD)  # the abort lands after the body settled
            assert must_fire
            if returns == "the body's result":
                return result
            return ToolExecutionSuccess(value="from the wrapper", content=())

        rt.tools.register(make_tool("t", body))  # type: ignore[arg-type]
        rt.events.on("tools/execute", wrapper)
        future = rt.tools.submit(ToolBatchInput(calls=tuple(calls("t")), signal=controller.signal))
        must(held, "the wrapper to hold the result")
        controller.abort()
        result = future.result(GUARD).results[0].result
        expected = {"the body's result": None, "its own success": "ABORTED", "no body": "ABORTED_BEFORE_DISPATCH"}
        assert code_of(result) == expected[returns], result
        if returns == "the body's result":
            assert result.value == "from the body"
        assert ran == ([] if returns == "no body" else [True])


def test_an_async_call_is_launched_before_a_later_call_is_handed_to_a_call_actor() -> None:
    """Calls start in model order: c0's flight is launched before c1 goes
    to the work mailbox, so c1's body (on a call actor) sees c0's body
    start even while the executor's step goes on with c2 (whose guard
    waits for c1 to end)."""
    with started_runtime() as rt:
        c0_running, c1_done = threading.Event(), threading.Event()
        saw: list[bool] = []

        async def first(args: Any, ctx: Any) -> str:
            c0_running.set()
            return "c0"

        def second(args: Any, ctx: Any) -> str:
            saw.append(c0_running.wait(GUARD))
            c1_done.set()
            return "c1"

        rt.tools.register(make_tool("a", first))  # type: ignore[arg-type]
        rt.tools.register(make_tool("s", second))
        rt.tools.register(make_tool("g", lambda args, ctx: "c2"))

        def guard(execution: Any) -> None:
            if execution.call_id == "c2":
                must(c1_done, "call 1 to end")  # the step goes on only after c1 ended

        rt.tools.guard(guard)
        result = rt.tools.execute(ToolBatchInput(calls=tuple(calls("a", "s", "g"))))
        assert [r.result.value for r in result.results] == ["c0", "c1", "c2"], result.results
        assert saw == [True]


@pytest.mark.parametrize("wrapped", [False, True], ids=["a flight", "under a wrapper"])
def test_an_async_body_that_ended_before_the_abort_keeps_its_success_however_late_its_waiter_wakes(
    wrapped: bool,
) -> None:
    """The abort comes from a callback the loop runs right after the body's
    last step: the body settled first, so its success stands, whether the
    batch's executor hears of its end (a flight) or a call actor waits for
    it under a tools/execute wrapper (which wakes after the abort)."""
    with started_runtime() as rt:
        controllers: list[AbortController] = []

        async def body(args: Any, ctx: Any) -> str:
            asyncio.get_running_loop().call_soon(controllers[-1].abort)  # after this, its last step
            return "v"

        rt.tools.register(make_tool("b", body))  # type: ignore[arg-type]
        if wrapped:
            rt.events.on("tools/execute", lambda execution, next_: next_())
        codes = []
        for _ in range(20):
            controller = AbortController()
            controllers.append(controller)
            result = rt.tools.execute(ToolBatchInput(calls=tuple(calls("b")), signal=controller.signal))
            codes.append(code_of(result.results[0].result))
        assert codes == [None] * 20


def test_a_retrying_wrapper_that_returns_its_first_success_keeps_it_when_the_abort_came_after_it() -> None:
    """The abort is held against the moment the returned success settled:
    a wrapper runs the body twice, the abort lands during the second
    attempt, and the wrapper returns the first success, which settled
    before the abort: it stays a success."""
    with started_runtime() as rt:
        controller = AbortController()
        attempts: list[bool] = []

        def body(args: Any, ctx: Any) -> str:
            attempts.append(ctx.signal.aborted)
            if len(attempts) == 2:
                controller.abort()  # during the second attempt, after the first settled
            return f"v{len(attempts)}"

        def retry_once(execution: Any, next_: Any) -> Any:
            first = next_()
            next_()
            return first

        rt.tools.register(make_tool("t", body))
        rt.events.on("tools/execute", retry_once)
        result = rt.tools.execute(ToolBatchInput(calls=tuple(calls("t")), signal=controller.signal)).results[0].result
        assert attempts == [False, False]
        assert result.value == "v1", result


@pytest.mark.parametrize("hook", ["pre-execute listener", "guard"])
@pytest.mark.parametrize("limit", [1, 4])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_hook_that_changes_the_registry_for_every_call_fails_the_call_instead_of_preparing_it_forever(
    hook: str, limit: int, kind: str
) -> None:
    # A change before a call's body starts sends it back to be prepared
    # again (the rule above); a hook that registers a tool whenever it runs
    # makes every preparation stale. The call fails POLICY_FAILED, naming
    # the likely cause, after a bounded number of tries; its tool/result
    # is logged and post-execute sees it.
    from dsh_actors.pipeline.call import MAX_UNPREPARED

    session = Session()
    ran: list[str] = []
    post: list[Any] = []

    async def async_body(args: Any, ctx: Any) -> str:
        ran.append(ctx.call_id)
        return "ran"

    def sync_body(args: Any, ctx: Any) -> str:
        ran.append(ctx.call_id)
        return "ran"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", async_body if kind == "async" else sync_body))
        count = [0]

        def side_effect() -> None:
            count[0] += 1
            rt.tools.register(make_tool(f"helper_{count[0]}", sync_body))

        if hook == "guard":
            rt.tools.guard(lambda execution: side_effect())
        else:
            rt.events.on("tools/pre-execute", lambda execution, next_: (side_effect(), next_())[1])
        rt.events.on("tools/post-execute", lambda execution, result, next_: post.append(result) or next_())
        batch = ToolBatchInput(
            calls=tuple(calls("t", "t")),
            agent=Agent("a", session=session),
            log=LogStep(turn=1, step=1),
            max_parallel_tool_calls=limit,
        )
        result = rt.tools.submit(batch).result(GUARD)
    assert ran == []
    for each in result.results:
        assert code_of(each.result) == "POLICY_FAILED"
        assert f'tool "t" was prepared {MAX_UNPREPARED} times' in each.result.error.message
    assert len(post) == 2
    logged = [e["call_id"] for e in session.events() if e["type"] == "tool/result"]
    assert logged == ["c0", "c1"]


@pytest.mark.parametrize("logged", [False, True], ids=["unlogged", "logged"])
@pytest.mark.parametrize("change", CHANGES)
def test_a_change_made_after_an_async_call_was_decided_and_before_its_flight_was_launched_applies_to_it(
    change: str, logged: bool
) -> None:
    """c0 is an async call the executor starts as a flight; its flight is
    launched with the step's others, after the executor has classified c1
    and logged its tool/call. c1's classifier makes the change (once), so
    it lands after c0 was decided and before its launch: c0's body had not
    started, and the change applies to it (it is prepared again)."""
    with started_runtime() as rt:
        timeline = Timeline()
        changed: list[bool] = []

        async def old_async(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                return "old"

        async def new_async(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                await asyncio.sleep(0)  # (a step more: c1 would overlap it, were c0 not alone)
                return "new"

        def plain(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                return "b"

        dispose_old = rt.tools.register(make_tool("a", old_async))  # type: ignore[arg-type]
        agent = Agent("agent", session=Session() if logged else None)

        def classify(args: Any) -> bool:
            if not changed:
                changed.append(True)
                if change == "guard":
                    rt.tools.guard(lambda execution: "late guard" if execution.name == "a" else None)
                elif change == "deny-listener":
                    rt.events.on(
                        "tools/pre-execute",
                        lambda execution, next_: Deny("late listener") if execution.name == "a" else next_(),
                    )
                elif change == "unregister":
                    dispose_old()
                elif change == "restrict":
                    rt.tools.scope(agent).restrict(ToolRestriction(deny=("a",)))
                else:
                    dispose_old()
                    rt.tools.register(make_tool("a", new_async, classifier=None))  # type: ignore[arg-type]
            return True

        rt.tools.register(make_tool("b", plain, classifier=classify))
        batch = ToolBatchInput(
            calls=tuple(calls("a", "b")),
            agent=agent,
            log=LogStep(turn=1, step=1) if logged else None,
            max_parallel_tool_calls=4,
        )
        result = rt.tools.submit(batch).result(GUARD)
        first, second = (r.result for r in result.results)
        assert second.value == "b"
        if change == "guard":
            assert _message(first) == "late guard"
        elif change == "deny-listener":
            assert _message(first) == "late listener"
        elif change in ("unregister", "restrict"):
            assert code_of(first) == "UNKNOWN_TOOL"
        else:
            assert first.value == "new"
            assert not timeline.overlaps("c0", "c1"), (timeline.starts, timeline.ends)
        if change != "exclusive-replacement":
            assert "c0" not in timeline.starts, timeline
        if logged:
            kinds = [(e["type"], e.get("call_id")) for e in agent.session.events() if e["type"] != "tool/batch"]  # type: ignore[union-attr]
            assert kinds.count(("tool/call", "c0")) == 1  # logged once, prepared twice
            assert kinds.count(("tool/start", "c0")) == (1 if change == "exclusive-replacement" else 0)


def _sent_back_at_launch(rt: Any, starts: list[str]) -> None:
    """Tools ``a`` and ``b``, async, their bodies noting their starts;
    ``b``'s classifier registers a tool the first time it runs: a call of
    ``b`` after a call of ``a`` sends the ``a`` call back as its flight is
    launched (it was decided before the change)."""
    changed: list[bool] = []
    lock = threading.Lock()

    async def body(args: Any, ctx: Any) -> str:
        with lock:
            starts.append(ctx.call_id)
        return ctx.call_id

    def classify(args: Any) -> bool:
        if not changed:
            changed.append(True)
            rt.tools.register(make_tool("z", lambda args, ctx: "z"))
        return True

    rt.tools.register(make_tool("a", body))  # type: ignore[arg-type]
    rt.tools.register(make_tool("b", body, classifier=classify))  # type: ignore[arg-type]


def test_flights_sent_back_at_their_launch_start_in_model_order() -> None:
    """c0's flight goes back as it is launched; c1, decided after it (and
    prepared again after its own classifier's change), goes back with it:
    the bodies start, and their tool/start are logged, in model order."""
    with started_runtime() as rt:
        starts: list[str] = []
        _sent_back_at_launch(rt, starts)
        session = Session()
        batch = ToolBatchInput(
            calls=tuple(calls("a", "b")),
            agent=Agent("agent", session=session),
            log=LogStep(turn=1, step=1),
            max_parallel_tool_calls=4,
        )
        result = rt.tools.submit(batch).result(GUARD)
        assert [r.result.value for r in result.results] == ["c0", "c1"]
        assert starts == ["c0", "c1"]
        assert [e["call_id"] for e in session.events() if e["type"] == "tool/start"] == ["c0", "c1"]


def test_a_later_calls_approval_is_not_asked_before_an_earlier_flight_sent_back_is_prepared_again() -> None:
    """c1's pre-execute hooks come after c0's flight is launched; c0 goes
    back then, so c1's hooks wait for c0 to be prepared again: c1's
    approval is asked once (it was asked, and its answer thrown away,
    before)."""
    with started_runtime() as rt:
        starts: list[str] = []
        asked: list[str] = []
        _sent_back_at_launch(rt, starts)

        def ask_for_b(execution: Any, next_: Any) -> Any:
            return Ask(reason="b needs a person") if execution.name == "b" else next_()

        def service(request: Any) -> str:
            asked.append(request.call_id)
            return "rejected"

        rt.events.on("tools/pre-execute", ask_for_b)
        rt.approvals.set(service)
        batch = ToolBatchInput(calls=tuple(calls("a", "b")), agent=Agent("agent"), max_parallel_tool_calls=4)
        result = rt.tools.submit(batch).result(GUARD)
        first, second = (r.result for r in result.results)
        assert first.value == "c0" and _message(second) == 'the user rejected tool "b"'
        assert asked == ["c1"]


def test_a_call_put_while_the_idle_server_was_told_to_leave_is_taken_by_it() -> None:
    """One server busy, one idle; nothing more was coming, so the idle one
    was told to leave (a LEAVE queued, its wake-up rung). A call put before
    it wakes used to queue behind that LEAVE: the idle server left, no
    other was asked for (one was idle), and the call waited for the busy
    one's body. The put takes the LEAVE back: the idle server takes the
    call, and no other server is asked for."""
    from dsh_actors.scheduling.inbox import BatchInbox
    from dsh_actors.scheduling.pool import WorkMailbox

    budget = _Budget()
    mailbox = WorkMailbox(2, budget, BatchInbox(None))  # type: ignore[arg-type]
    with budget.lock:
        mailbox.servers = 2  # both arrived: one runs a call, one waits idle (as take() counts it)
        mailbox.idle = 1
    mailbox.release_idle()  # nothing more for now: the idle server is told to leave
    assert mailbox.sentinels == 1
    assert mailbox.put("c2") is True  # type: ignore[arg-type]
    mailbox._wait()  # the idle server wakes (its wake-up was rung for the LEAVE)
    assert mailbox.take(wait=False) == "c2"
    assert budget.requests == 0
    mailbox.assert_invariants()
    mailbox.close()


def test_a_call_sent_back_before_its_hooks_ever_ran_is_aborted_without_post_execute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """c1's prepare launches c0's flight before c1's pre-execute listeners,
    and c0 goes back (stale); so c1 goes back too, its hooks not run. The
    abort lands right then: c0, whose phases ran, passes post-execute; c1,
    which no phase ever saw, does not (reference: "one never prepared runs
    no phase")."""
    from dsh_actors.scheduling.batch import BatchRun

    with started_runtime() as rt:
        starts: list[str] = []
        _sent_back_at_launch(rt, starts)
        pre: list[str] = []
        post: list[str] = []

        def seen_pre(execution: Any, next_: Any) -> Any:
            pre.append(execution.call_id)
            return next_()

        def seen_post(execution: Any, result: Any, next_: Any) -> Any:
            post.append(execution.call_id)
            return next_()

        rt.events.on("tools/pre-execute", seen_pre)
        rt.events.on("tools/post-execute", seen_post)
        controller = AbortController()
        launch = BatchRun._launch
        fired: list[bool] = []

        def aborting(self: BatchRun) -> bool:
            if not fired:  # (the launch c1's prepare makes before its hooks)
                fired.append(True)
                controller.abort("the user stopped")
            return launch(self)

        monkeypatch.setattr(BatchRun, "_launch", aborting)
        batch = ToolBatchInput(calls=tuple(calls("a", "b")), signal=controller.signal, max_parallel_tool_calls=4)
        result = rt.tools.submit(batch).result(GUARD)
        assert [code_of(r.result) for r in result.results] == ["ABORTED_BEFORE_DISPATCH"] * 2
        assert starts == []
        assert pre == ["c0"] and post == ["c0"]


@pytest.mark.parametrize("body_kind", ["sync", "async"])
@pytest.mark.parametrize("change", ["replace-with-approval", "unregister"])
@pytest.mark.parametrize("size", [1, 2], ids=["inline", "call-actor"])
def test_a_change_made_while_a_calls_wrappers_run_does_not_apply_to_it(body_kind: str, change: str, size: int) -> None:
    # The body used to be looked up again as it was entered: a tool replaced
    # while a wrapper held the call ran the replacement's body (one that
    # requires approval, without it), and an unregistered one failed
    # UNKNOWN_TOOL. A running call keeps what it was prepared with.
    from dsh_actors import define_tool

    with started_runtime() as rt:
        in_wrapper = threading.Event()
        changed = threading.Event()

        if body_kind == "sync":

            def old_body(args: Any, ctx: Any) -> str:
                return "v1"
        else:

            async def old_body(args: Any, ctx: Any) -> str:  # type: ignore[misc]
                return "v1"

        def new_body(args: Any, ctx: Any) -> str:
            return "v2"

        def hold(execution: Any, next_: Any) -> Any:
            if execution.call_id == "c0":
                in_wrapper.set()
                must(changed, "the test's change")
            return next_()

        unregister = rt.tools.register(make_tool("t", old_body))
        rt.events.on("tools/execute", hold)
        future = rt.tools.submit(ToolBatchInput(calls=tuple(calls(*["t"] * size))))
        must(in_wrapper, "c0 in its wrapper")
        unregister()
        if change == "replace-with-approval":
            rt.tools.register(
                define_tool(
                    name="t",
                    description="needs a person",
                    parameters={},
                    output=ToolOutput(schema={"type": "string"}),
                    execute=new_body,
                    requires_approval=True,
                )
            )
        changed.set()
        batch = future.result(GUARD)
    assert batch.results[0].result.value == "v1", batch.results[0].result


@pytest.mark.parametrize("change", ["unregister", "replace"])
def test_a_nested_call_whose_tool_changed_while_its_approval_waited_runs_what_holds_now(change: str) -> None:
    # (A nested call went straight from prepare to its body: it ran the
    # unregistered tool, since its body runs what it was prepared with.)
    from dsh_actors import ToolExecutionInput, define_tool

    with started_runtime() as rt:
        asked, answer = threading.Event(), threading.Event()
        ran: list[str] = []

        def approve(request: Any) -> str:
            asked.set()
            must(answer, "the test's answer")
            return "allowed-once"

        def old(args: Any, ctx: Any) -> str:
            ran.append("old")
            return "v1"

        def new(args: Any, ctx: Any) -> str:
            ran.append("new")
            return "v2"

        def definition(body: Any, requires_approval: bool) -> Any:
            return define_tool(
                name="t",
                description="t",
                parameters={},
                output=ToolOutput(schema={"type": "string"}),
                execute=body,
                requires_approval=requires_approval,
            )

        rt.approvals.set(approve)
        unregister = rt.tools.register(definition(old, True))
        out: list[Any] = []
        nested = threading.Thread(
            target=lambda: out.append(
                rt.tools.dispatch(
                    ToolExecutionInput(
                        call_id="n1", name="t", arguments={}, agent=Agent("main"), signal=AbortController().signal
                    )
                )
            )
        )
        nested.start()
        must(asked, "the approval service to be asked")
        unregister()
        if change == "replace":
            rt.tools.register(definition(new, False))
        answer.set()
        nested.join(GUARD)
        assert not nested.is_alive()
    result = out[0]
    if change == "unregister":
        assert code_of(result) == "UNKNOWN_TOOL" and ran == []
    else:
        assert result.value == "v2" and ran == ["new"]


@pytest.mark.parametrize("mode", ["wrapper's own success", "post-execute Accept(value=)"])
def test_a_value_supplied_for_a_call_whose_tool_was_replaced_meanwhile_is_checked_by_the_tool_it_runs(
    mode: str,
) -> None:
    # (The body ran the prepared tool, but a success a wrapper made, or a
    # post-execute replacement value, was checked against the replacement:
    # INVALID_TOOL_OUTPUT, blaming the tool for a value it never returned.)
    from dsh_actors import Accept, ToolExecutionSuccess, define_tool

    with started_runtime() as rt:
        held, changed = threading.Event(), threading.Event()

        def hold(execution: Any, next_: Any) -> Any:
            held.set()
            must(changed, "the test's replacement")
            if mode == "wrapper's own success":
                return ToolExecutionSuccess(value="cached", content=(text("cached"),))
            return next_()

        def definition(kind: str, body: Any) -> Any:
            return define_tool(
                name="t", description="t", parameters={}, output=ToolOutput(schema={"type": kind}), execute=body
            )

        unregister = rt.tools.register(definition("string", lambda args, ctx: "v1"))
        rt.events.on("tools/execute", hold)
        if mode != "wrapper's own success":
            rt.events.on("tools/post-execute", lambda execution, result, next_: Accept(value="w"))
        future = rt.tools.submit(ToolBatchInput(calls=(call(0, "t"),)))
        must(held, "the call in its wrapper")
        unregister()
        rt.tools.register(definition("integer", lambda args, ctx: 2))
        changed.set()
        result = future.result(GUARD).results[0].result
    assert result.value == ("cached" if mode == "wrapper's own success" else "w"), result
