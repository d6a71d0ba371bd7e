"""The executor actor's and call actors' vocabulary (internal)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Union

if TYPE_CHECKING:  # pragma: no cover
    import pykka

    from ..model import ToolBatchInput
    from ..pipeline.stages import Call


class Reply(Protocol):
    """What a batch's result is settled into: a
    ``concurrent.futures.Future``, or anything with the same four methods
    (``ToolsService.execute`` uses a lighter one-shot reply)."""

    def set_running_or_notify_cancel(self) -> bool: ...

    def set_result(self, result: Any) -> None: ...

    def set_exception(self, exception: BaseException | None) -> None: ...

    def done(self) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RunBatch:
    """Run ``batch`` and settle ``reply`` with its ToolBatchResult."""

    batch: ToolBatchInput
    """The raw batch from the caller."""
    reply: Reply
    """Settled once every started call has settled."""
    limit: int
    """The concurrency limit for this batch (already validated)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortBatch:
    """The batch's signal fired: stop starting calls."""

    batch_id: int
    """Which batch (a stale abort for an earlier batch is ignored)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallSettled:
    """A call actor finished dispatching call ``index``."""

    batch_id: int
    """The batch the call belongs to."""
    index: int
    """The call's position in the batch (model order)."""
    worker: pykka.ActorRef[Any] | None
    """The call actor, free again: the next call goes to it (None when it
    took the next ready call itself, see ``took``)."""
    took: int | None = None
    """The index of the ready call the call actor took from the batch's
    ready queue and is now dispatching, if any."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """The batch's self-served run is over: the last call actor to stop
    serving it says so (each one went back to the pool by itself; when the
    executor is the last, no message is needed)."""

    batch_id: int
    """The batch served."""
    error: BaseException | None = None
    """The first bug in the pipeline while serving (the batch then fails)."""


ExecutorMessage = Union[RunBatch, AbortBatch, CallSettled, Served]


@dataclass(frozen=True, slots=True, kw_only=True)
class Dispatch:
    """Run the dispatch stage of ``call`` and tell ``executor`` when done."""

    call: Call
    """The call; owned by the call actor until it reports CallSettled."""
    executor: pykka.ActorRef[Any]
    """Where to send CallSettled."""
    batch_id: int
    """Echoed back in CallSettled."""
    ready: Any = None
    """The batch's ready queue (a ``ReadyQueue``): prepared calls the call
    actor may take when it is done, instead of waiting for a Dispatch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Serve:
    """Claim calls from the batch's self-served run (a ``SelfServe``) in
    model order and run each one's whole trip (prepare, dispatch,
    finalize) until none is left; then tell ``executor`` ``Served``."""

    serving: Any
    """The run's shared cursor (a ``SelfServe``)."""
    executor: pykka.ActorRef[Any]
    """Where to send Served."""
    batch_id: int
    """Echoed back in Served."""


CallMessage = Union[Dispatch, Serve]
