"""The actor base (dsh_actors/actors.py): pykka's public API only, handlers
that cannot kill their loop, groups that stop and join exactly their own
threads, and pykka's ask on rt.registry answered when the work is done."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pykka
import pytest

from dsh_actors import ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool, text
from dsh_actors.actors import (
    RETIRE,
    ActorBase,
    ActorGroup,
    Address,
    MailboxActor,
    RegistryRef,
    actor_thread_ident,
    settle,
)
from dsh_actors.messages import ExecuteBatch

GUARD = 10.0


class Echo(ActorBase):
    def __init__(self, group: ActorGroup, seen: list[Any], done: threading.Event) -> None:
        super().__init__(group)
        self.seen = seen
        self.done = done

    def receive(self, message: Any) -> Any:
        if message == "raise":
            raise ValueError("a handler bug")
        if message == "exit":
            raise SystemExit(3)  # pykka would answer this with ActorRegistry.stop_all()
        if message == "who":
            self.seen.append(actor_thread_ident() is self)
        self.seen.append(message)
        if message == "last":
            self.done.set()
        return message


def test_a_raising_handler_leaves_the_actor_and_every_other_actor_running() -> None:
    group = ActorGroup()
    seen: list[Any] = []
    done = threading.Event()
    bystander = Echo.spawn(group, [], threading.Event())
    ref = Echo.spawn(group, seen, done)
    try:
        for message in ("raise", "exit", "who", "last"):
            ref.tell(message)
        assert done.wait(GUARD)
        assert seen == [True, "who", "last"]
        assert ref.is_alive() and bystander.is_alive()
    finally:
        assert group.stop_all(GUARD) == []


def test_stop_all_stops_and_joins_every_thread_of_the_group_and_only_those() -> None:
    group, other = ActorGroup(), ActorGroup()
    refs = [Echo.spawn(group, [], threading.Event()) for _ in range(5)]
    outsider = Echo.spawn(other, [], threading.Event())
    retired = Echo.spawn(group, [], threading.Event())
    group.retire(retired)
    try:
        for ref in refs:
            ref.ask("ping", timeout=GUARD)  # every actor has started (and named its thread)
        threads = group.threads()
        assert len(threads) >= 5 and all(t.name == "dsh-Echo" for t in threads)
        assert group.stop_all(GUARD) == []
        assert not any(t.is_alive() for t in threads)
        assert outsider.is_alive()
        with pytest.raises(RuntimeError, match="stopped"):
            Echo.spawn(group, [], threading.Event())
    finally:
        other.stop_all(GUARD)


def test_settle_settles_a_reply_once() -> None:
    future: Future[Any] = Future()
    settle(future, 1)
    settle(future, 2)
    settle(future, error=ValueError("late"))
    settle(None, 3)
    assert future.result() == 1


def _echo_tool() -> Any:
    return define_tool(
        name="echo",
        description="echo",
        parameters={"message": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
        execute=lambda args, ctx: args["message"],
        is_concurrency_safe=lambda args: True,
    )


def test_ask_on_the_registry_answers_with_the_batch_result_and_settles_the_requests_own_reply() -> None:
    with ToolRuntime() as rt:
        rt.tools.register(_echo_tool())
        assert isinstance(rt.registry, pykka.ActorRef) and isinstance(rt.registry, RegistryRef)
        batch = ToolBatchInput(calls=[ToolCall("c1", "echo", '{"message": "hi"}')])
        assert rt.registry.ask(ExecuteBatch(batch), timeout=GUARD).results[0].result.value == "hi"
        theirs: Future[Any] = Future()
        answer = rt.registry.ask(ExecuteBatch(batch, reply=theirs), block=False)
        assert answer.get(timeout=GUARD).results[0].call_id == "c1"
        assert theirs.result(GUARD).results[0].result.value == "hi"
        with pytest.raises(TypeError, match="ToolBatchInput"):
            rt.registry.ask(ExecuteBatch("not a batch"), timeout=GUARD)  # type: ignore[arg-type]


def test_the_runtime_joins_every_thread_it_started() -> None:
    before = set(threading.enumerate())
    rt = ToolRuntime().start()
    rt.tools.register(_echo_tool())
    calls = [ToolCall(f"c{i}", "echo", '{"message": "hi"}') for i in range(30)]
    rt.tools.execute(ToolBatchInput(calls=calls))
    started = set(threading.enumerate()) - before
    assert any(t.name == "dsh-CallActor" for t in started)
    threads = rt.group.threads()
    rt.stop()
    assert not any(t.is_alive() for t in threads)
    assert not any(t.is_alive() for t in started)


class Refusing(MailboxActor):
    """Records what it handles and what it refuses (with the thread)."""

    def __init__(self, group: ActorGroup, handled: list[Any], refused: list[Any], retired: threading.Event) -> None:
        super().__init__(group)
        self.handled = handled
        self.refused = refused
        self.took_retire = retired

    def handle(self, message: Any) -> None:
        self.handled.append(message)

    def refuse_queued(self) -> None:
        super().refuse_queued()
        if self.retired:
            self.took_retire.set()

    def refuse(self, message: Any) -> None:
        self.refused.append(message)


def test_a_message_that_lands_after_retire_is_refused_once_never_left_unread() -> None:
    # The race a stop wins: the sender saw the actor alive, the actor then
    # took RETIRE and emptied its mailbox, and only then did the put land.
    # The sender finds it retired and refuses what is left (once).
    group = ActorGroup()
    handled: list[Any] = []
    refused: list[Any] = []
    retired = threading.Event()
    address = Refusing.open(group, handled, refused, retired)
    try:
        address.tell("before")
        address.mailbox.put(RETIRE)  # (what stop_all and retire put first)
        assert retired.wait(GUARD)
        assert address.ref.is_alive()  # pykka's stop has not come yet
        address.tell("late")
        assert handled == ["before"]
        assert refused == ["late"]
    finally:
        assert group.stop_all(GUARD) == []
    assert refused == ["late"]


def test_a_message_queued_before_pykka_stopped_an_actor_that_never_read_its_mailbox_is_refused() -> None:
    # pykka's stop can reach the actor ahead of OPEN (the stop raced its
    # spawn): it never reads its mailbox, and what was queued there is
    # refused when it stops, as is what is put once it has.
    group = ActorGroup()
    handled: list[Any] = []
    refused: list[Any] = []
    ref = Refusing.start(group, handled, refused, threading.Event())  # (no OPEN)
    actor = group.actor(ref)
    assert isinstance(actor, Refusing)
    address = Address(actor)
    address.tell("queued")
    ref.stop(block=True, timeout=GUARD)
    assert refused == ["queued"] and handled == []
    with pytest.raises(pykka.ActorDeadError):
        address.tell("after")
    assert group.stop_all(GUARD) == []


class _Inner(ActorBase):
    def receive(self, message: Any) -> Any:
        return None


class _Outer(ActorBase):
    def __init__(self, group: ActorGroup) -> None:
        super().__init__(group)
        self.child = _Inner.spawn(group)  # an actor whose __init__ starts another

    def receive(self, message: Any) -> Any:
        return None


def spawn_without_a_thread(kind: type, group: ActorGroup, first: Any = None) -> None:
    """``kind.spawn(group)`` as at the process's thread limit: pykka's
    thread start raises once pykka has made and registered the actor (after
    ``first(actor)``, if given); the error reaches the spawner."""

    def failing(self: Any) -> None:
        if first is not None:
            first(self)
        raise RuntimeError("can't start new thread")

    setattr(kind, "_start_actor_loop", failing)  # noqa: B010 - pykka's thread start, for this class only
    try:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            kind.spawn(group)
    finally:
        delattr(kind, "_start_actor_loop")


@pytest.mark.parametrize("kind", [_Inner, _Outer])
def test_an_actor_whose_thread_cannot_be_started_is_undone_and_stop_all_does_not_wait_for_it(kind: type) -> None:
    # Thread.start fails (the process is at its thread limit) after pykka
    # made and registered the actor: it is unregistered, out of the group
    # and stopped, even when its own __init__ started another actor first.
    group = ActorGroup()
    spawn_without_a_thread(kind, group)
    assert not [ref for ref in pykka.ActorRegistry.get_all() if ref.actor_class is kind]
    done = threading.Event()
    left: list[str] = []
    stopper = threading.Thread(target=lambda: (left.extend(group.stop_all(30.0)), done.set()), name="test-stop-all")
    stopper.start()
    assert done.wait(GUARD), "stop_all waited for an actor whose thread never started"
    stopper.join(GUARD)
    assert left == []


def test_a_stop_asked_of_an_actor_as_its_thread_fails_to_start_is_answered() -> None:
    # The race with the runtime's stop: stop_all asked the actor to stop
    # (pykka queued the request: the actor was not stopped yet) and then
    # found it still a member, just before its start failed and undid it.
    # The undo answers what was queued, as pykka does for a stopped actor,
    # so that stop waits for nothing.
    group = ActorGroup()
    asked: list[Any] = []

    def ask(actor: Any) -> None:
        asked.append(actor.actor_ref.stop(block=False))  # (stop_all's request, queued in time)
        asked.append(actor.actor_ref.ask("a question", block=False))

    spawn_without_a_thread(_Inner, group, first=ask)
    stop, question = asked
    assert stop.get(timeout=0) is True  # answered as a stopped actor answers a stop
    with pytest.raises(pykka.ActorDeadError, match="stopped before handling the message"):
        question.get(timeout=0)
    assert group.stop_all(GUARD) == []
