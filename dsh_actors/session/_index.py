"""Where each model step's events are in a session's log, so that reading
one step back (``Session.read_step``: a resume, a recovery) parses that
step's lines, not the whole log: with many agents sharing one log, reading
every agent's step would otherwise parse the log once per agent.

A :class:`StepIndex` holds positions only (two ints an event: a line's
start and end offset in the file, or its number in an in-memory session),
never an event. ``Session`` extends it, when a step is read, with the lines
logged since it was last extended (each line is parsed once for it), and
reads a step's lines where it says.

What reading step ``(turn, step)`` of an agent needs (so that
``read_step`` over them says what it says over every event): the events
that name that step and that agent (``tool/batch``, ``tool/call``,
``tool/start``, ``tool/result``, ``tool/approval-request``), the agent's
first ``tool/batch`` (which step it names: once the agent logged one, a
``tool/call`` line is a call only as its step's batch names it,
``CallLines``), and the ``tool/approval`` decisions of the suspensions its
requests name. An event
that names no step or no agent (a log written before events carried them,
or by hand) pairs with the calls of any step or agent: once the log holds
one, a step's read reads every event (:attr:`StepIndex.whole`).
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Mapping
from typing import Any, Final

from ._events import APPROVAL, APPROVAL_REQUEST, BATCH, CALL, RESULT, START, StepKey, parent_of, step_key

#: The events that pair with a step's calls, each naming the step (and agent) it is of.
_STEP_EVENTS: Final = frozenset({CALL, START, RESULT, APPROVAL_REQUEST})


class StepIndex:
    """The positions of each step's events, and which logged steps a call's
    body ran (the ``tool/batch`` events naming it as their ``parent``).
    ``end``: what is indexed, the offset of the first byte (a file) or the
    number of the first line (in memory) not indexed yet."""

    __slots__ = ("end", "whole", "_steps", "_approvals", "_requests", "_children", "_first_batches")

    def __init__(self) -> None:
        self.end = 0
        self.whole = False
        """The log holds an event that names no step or no agent (or a
        malformed approval event): a step's read reads every event."""
        # (turn, step) -> agent id -> the (start, end) of its events, in log order
        self._steps: dict[tuple[int, int], dict[str, array[int]]] = {}
        # suspension id -> the (start, end) of its tool/approval events
        self._approvals: dict[str, array[int]] = {}
        # suspension id -> the steps its tool/approval-request events name,
        # in log order (the keys of a dict, as below)
        self._requests: dict[str, dict[StepKey, None]] = {}
        # (a call's step, its id) -> the steps whose tool/batch names it as
        # parent, in log order (the keys of a dict: a step run again is not
        # added twice, and finding it costs no scan of the others)
        self._children: dict[tuple[StepKey, str], dict[StepKey, None]] = {}
        # agent id -> the (start, end) of its first tool/batch: whether the
        # agent logged one before a tool/call decides whether that line is a
        # call (CallLines)
        self._first_batches: dict[str, tuple[int, int]] = {}

    def add(self, start: int, end: int, event: Mapping[str, Any]) -> None:
        """Index ``event``, the line from ``start`` to ``end`` (log order)."""
        kind = event.get("type")
        if kind == APPROVAL:
            suspension = event.get("suspension")
            if type(suspension) is not str or type(event.get("call_id")) is not str:
                self._read_whole()  # (read_step refuses it, wherever it is)
            elif not self.whole:
                self._approvals.setdefault(suspension, array("q")).extend((start, end))
            return
        if kind != BATCH and kind not in _STEP_EVENTS:
            return  # (an event read_step does not read)
        key = step_key(event)
        if kind == BATCH:
            if key is None:
                return  # (a batch of no step is no step's)
            parent = parent_of(event)
            if parent is not None:
                self._children.setdefault(parent, {}).setdefault(key)
            if key[2] is not None and not self.whole:
                self._first_batches.setdefault(key[2], (start, end))
        elif kind == APPROVAL_REQUEST and (
            type(event.get("call_id")) is not str or type(event.get("suspension")) is not str
        ):
            key = None
        if key is None or key[2] is None:
            self._read_whole()
        elif not self.whole:
            self._steps.setdefault((key[0], key[1]), {}).setdefault(key[2], array("q")).extend((start, end))
            if kind == APPROVAL_REQUEST:
                self._requests.setdefault(event["suspension"], {}).setdefault(key)

    def _read_whole(self) -> None:
        self.whole = True
        self._steps.clear()
        self._approvals.clear()
        self._requests.clear()
        self._first_batches.clear()

    def step_spans(self, turn: int, step: int, agent: str | None) -> list[tuple[int, int]]:
        """Where the events of step ``(turn, step)`` of ``agent`` (None: of
        every agent) are, with the first ``tool/batch`` of each of their
        agents (of another step, it tells that the agent's ``tool/call``
        lines after it are calls only as its batches name them:
        ``CallLines``), in log order (not :attr:`whole`)."""
        by_agent = self._steps.get((turn, step))
        if not by_agent:
            return []
        found = by_agent.items() if agent is None else [(agent, by_agent[agent])] if agent in by_agent else []
        spans = {span for _, positions in found for span in _pairs(positions)}
        spans.update(self._first_batches[named] for named, _ in found if named in self._first_batches)
        return sorted(spans)

    def approval_spans(self, suspensions: Collection[str]) -> list[tuple[int, int]]:
        """Where the ``tool/approval`` events of ``suspensions`` are, in log order."""
        found = (self._approvals.get(suspension) for suspension in suspensions)
        return sorted(span for positions in found if positions is not None for span in _pairs(positions))

    def request_steps(self, suspension: str) -> tuple[StepKey, ...]:
        """The steps whose ``tool/approval-request`` events name
        ``suspension``, in log order (not :attr:`whole`)."""
        return tuple(self._requests.get(suspension, ()))

    def children(self, here: StepKey, call_id: str) -> tuple[StepKey, ...]:
        """The steps whose ``tool/batch`` names call ``call_id`` of step
        ``here`` as its ``parent``, in log order."""
        return tuple(self._children.get((here, call_id), ()))


def _pairs(positions: array[int]) -> Any:
    return zip(positions[::2], positions[1::2], strict=True)
