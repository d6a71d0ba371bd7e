"""policies.approval: RememberingService (and RuleService) around an
``async def`` approval service: awaited on the batch's loop, its "always"
and "never" remembered as a sync service's are."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from typing import Any

from policy_helpers import WAIT, Recorder, call, code_of, run, run_one, tool

from dsh_actors import (
    AbortController,
    AbortSignal,
    Agent,
    ApprovalRequest,
    Ask,
    ToolBatchInput,
    ToolRuntime,
    materialize,
)
from policies.approval import Answer, RememberingService, RuleService, allow

MAIN = Agent("main")


def request(call_id: str = "c1", **arguments: Any) -> ApprovalRequest:
    return ApprovalRequest(
        agent=MAIN,
        tool_name="echo",
        call_id=call_id,
        reason="it echoes",
        display_reason=None,
        signal=AbortSignal(),
        arguments=materialize(arguments),
    )


def always_ask(execution: Any, next_: Any) -> Any:
    return Ask(reason="policy says ask")


class AsyncScripted:
    """An async service answering from a script; it records the calls it
    was asked about and whether it ran on an event loop."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.asked = Recorder()
        self.loops = Recorder()

    async def decide(self, req: ApprovalRequest) -> Answer:
        self.loops.add(asyncio.get_running_loop())
        await asyncio.sleep(0)
        self.asked.add(req.call_id)
        return self.answers.pop(0)

    async def __call__(self, req: ApprovalRequest) -> str:
        return (await self.decide(req)).answer


def asked_twice(rt: Any, answer: str) -> tuple[AsyncScripted, RememberingService, Any, Any]:
    """Two calls with the same arguments, each asked through a remembering
    service around an async one that answers ``answer`` to remember."""
    inner = AsyncScripted(Answer(answer, remember=True))
    service = RememberingService(inner)
    rt.events.on("tools/pre-execute", always_ask)
    rt.approvals.set(service)
    rt.tools.register(tool())
    first = run_one(rt, call(id="c1", message="hi"), agent=MAIN)
    again = run_one(rt, call(id="c2", message="hi"), agent=MAIN)
    return inner, service, first, again


def test_an_async_always_is_remembered_through_the_runtime(rt: Any) -> None:
    inner, service, first, again = asked_twice(rt, "allowed-once")

    assert not first.is_error and first.value == "hi"
    assert not again.is_error and again.value == "hi"
    assert inner.asked.items == ["c1"]  # the second call was not asked
    assert len(service) == 1


def test_an_async_never_is_remembered_as_a_rejection(rt: Any) -> None:
    inner, _, first, again = asked_twice(rt, "rejected")

    for result in (first, again):
        assert result.error is not None and result.error.message == 'the user rejected tool "echo"'
    assert inner.asked.items == ["c1"]


def test_a_remembered_answer_is_given_at_once_without_a_coroutine() -> None:
    inner = AsyncScripted(Answer("allowed-once", remember=True))
    service = RememberingService(inner)

    assert asyncio.run(_first_of(service(request()))) == "allowed-once"
    assert service(request("c2")) == "allowed-once"  # a str, not a coroutine
    assert service.decide(request("c3")) == Answer("allowed-once")
    assert inner.asked.items == ["c1"]


async def _first_of(pending: Any) -> Any:
    return await pending


def test_a_plain_async_inner_service_is_asked_every_time() -> None:
    asked = Recorder()

    async def plain(req: ApprovalRequest) -> str:
        asked.add(req.call_id)
        return "allowed-once"

    service = RememberingService(plain)
    assert asyncio.run(_first_of(service(request()))) == "allowed-once"
    assert asyncio.run(_first_of(service(request("c2")))) == "allowed-once"
    assert asked.items == ["c1", "c2"]
    assert len(service) == 0


def test_an_async_inner_service_runs_on_the_awaiting_loop() -> None:
    inner = AsyncScripted(Answer("allowed-once", remember=True))
    service = RememberingService(inner)

    async def main() -> tuple[Any, Any, asyncio.AbstractEventLoop]:
        with ToolRuntime() as rt:
            rt.events.on("tools/pre-execute", always_ask)
            rt.approvals.set(service)
            rt.tools.register(tool())
            first = await rt.tools.execute_async(ToolBatchInput(calls=[call(id="c1", message="a")], agent=MAIN))
            again = await rt.tools.execute_async(ToolBatchInput(calls=[call(id="c2", message="a")], agent=MAIN))
        return first.results[0].result, again.results[0].result, asyncio.get_running_loop()

    first, again, loop = asyncio.run(main())
    assert not first.is_error and not again.is_error
    assert inner.loops.items == [loop]
    assert inner.asked.items == ["c1"]


def test_a_rule_service_asking_an_async_service_inside_a_remembering_one(rt: Any) -> None:
    inner = AsyncScripted(Answer("allowed-once", remember=True))
    service = RememberingService(RuleService([allow("read")], default="ask", ask=inner))
    rt.events.on("tools/pre-execute", always_ask)
    rt.approvals.set(service)
    rt.tools.register(tool())
    rt.tools.register(tool("read"))

    results = [run_one(rt, call(id=f"c{i}", message="m"), agent=MAIN) for i in range(3)]
    read = run_one(rt, call("read", id="r1"), agent=MAIN)

    assert all(not r.is_error and r.value == "m" for r in results)
    assert not read.is_error
    assert inner.asked.items == ["c0"]


def test_concurrent_async_asks_are_all_answered_and_one_always_is_kept(rt: Any) -> None:
    gate = threading.Barrier(3, timeout=WAIT)

    class Concurrent:
        def __init__(self) -> None:
            self.asked = Recorder()

        async def decide(self, req: ApprovalRequest) -> Answer:
            self.asked.add(req.call_id)
            await asyncio.to_thread(gate.wait)  # all three are asking at once
            return Answer("allowed-once", remember=True)

        async def __call__(self, req: ApprovalRequest) -> str:
            return (await self.decide(req)).answer

    inner = Concurrent()
    service = RememberingService(inner)
    rt.events.on("tools/pre-execute", always_ask)
    rt.approvals.set(service)
    rt.tools.register(tool())

    def one(i: int) -> None:
        outcomes.add(run_one(rt, call(id=f"c{i}", message=str(i)), agent=Agent(f"a{i}")))

    outcomes = Recorder()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)

    assert sorted(r.value for r in outcomes.items) == ["0", "1", "2"]
    assert sorted(inner.asked.items) == ["c0", "c1", "c2"]
    assert len(service) == 3  # one per agent (per_agent=True)


def test_an_async_ask_cancelled_with_the_batch_denies_and_remembers_nothing(rt: Any) -> None:
    asking = threading.Event()
    cancelled = threading.Event()

    class Slow:
        async def decide(self, req: ApprovalRequest) -> Answer:
            asking.set()
            try:
                await asyncio.Event().wait()  # until the abort cancels it
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return Answer("allowed-once", remember=True)

        async def __call__(self, req: ApprovalRequest) -> str:
            return (await self.decide(req)).answer

    service = RememberingService(Slow())
    rt.events.on("tools/pre-execute", always_ask)
    rt.approvals.set(service)
    rt.tools.register(tool())
    controller = AbortController()

    def abort() -> None:
        if asking.wait(WAIT):
            controller.abort()

    aborter = threading.Thread(target=abort)
    aborter.start()
    batch = run(rt, call(message="x"), agent=MAIN, signal=controller.signal)
    aborter.join(WAIT)

    assert code_of(batch.results[0].result) == "ABORTED_BEFORE_DISPATCH"
    assert cancelled.is_set()
    assert len(service) == 0


def test_an_ask_closed_before_it_starts_leaves_no_unawaited_coroutine() -> None:
    service = RememberingService(RuleService([], default="ask", ask=AsyncScripted(Answer("allowed-once"))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pending = service(request())
        assert asyncio.iscoroutine(pending)
        pending.close()
        del pending
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
