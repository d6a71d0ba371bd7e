"""Answers of approval services: the vocabulary the core understands and
whether the user asked to make an answer permanent. Private to
``policies``; :mod:`policies.approval` re-exports the public names."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from dsh_actors import Agent, ApprovalRequest, InvalidTypeError, dumps, materialize

__all__ = [
    "ALLOWED_ONCE",
    "CANCELLED",
    "REJECTED",
    "UNAVAILABLE",
    "Answer",
    "Memory",
    "Service",
    "canonical_arguments",
    "decide",
]

ALLOWED_ONCE: Final = "allowed-once"
REJECTED: Final = "rejected"
CANCELLED: Final = "cancelled"
UNAVAILABLE: Final = "unavailable"


@dataclass(frozen=True, slots=True)
class Answer:
    """A service's answer and whether the user asked to make it permanent."""

    answer: str
    remember: bool = False


def decide(service: Callable[[ApprovalRequest], Any], request: ApprovalRequest) -> Answer:
    """Ask ``service``: its ``decide`` when it has one, else its plain answer
    (never to be remembered)."""
    method = getattr(service, "decide", None)
    if callable(method):
        answer = method(request)
        if type(answer) is Answer:
            return answer
        return Answer(answer)
    return Answer(service(request))


class Service:
    """``service(request) -> str`` from ``decide``."""

    def decide(self, request: ApprovalRequest) -> Answer:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, request: ApprovalRequest) -> str:
        return self.decide(request).answer

    def __bool__(self) -> bool:
        # A service is always truthy, even one whose __len__ (answers
        # remembered) is 0: ``service or default`` must keep it.
        return True


def canonical_arguments(arguments: Any) -> bytes | None:
    """The exact arguments as canonical JSON (sorted keys), or ``None`` when
    they are not lossless JSON (such calls are never remembered)."""
    try:
        return dumps(materialize(arguments), sort_keys=True)
    except Exception:  # noqa: BLE001
        return None


class Memory:
    """Answers made permanent (``"allowed-once"`` or ``"rejected"`` with
    ``remember=True``), keyed by the tool name, the exact arguments
    (canonical JSON) and, with ``per_agent``, the same
    :class:`~dsh_actors.Agent` object. Thread-safe."""

    def __init__(self, *, per_agent: bool = True) -> None:
        if type(per_agent) is not bool:
            raise InvalidTypeError("policies.approval: per_agent must be True or False")
        self.per_agent = per_agent
        self._lock = threading.Lock()
        self._answers: dict[tuple[Agent | None, str, bytes], str] = {}

    def _key(self, request: ApprovalRequest) -> tuple[Agent | None, str, bytes] | None:
        canonical = canonical_arguments(request.arguments)
        if canonical is None:
            return None
        return (request.agent if self.per_agent else None, request.tool_name, canonical)

    def recall(self, request: ApprovalRequest) -> str | None:
        """The answer remembered for ``request``, if any."""
        key = self._key(request)
        if key is None:
            return None
        with self._lock:
            return self._answers.get(key)

    def keep(self, request: ApprovalRequest, answer: Answer) -> None:
        """Remember ``answer`` when the user made it permanent."""
        if not answer.remember or answer.answer not in (ALLOWED_ONCE, REJECTED):
            return
        key = self._key(request)
        if key is not None:
            with self._lock:
                self._answers[key] = answer.answer

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)

    def forget(self, tool_name: str | None = None) -> None:
        """Forget every remembered answer (of ``tool_name`` only, if given)."""
        with self._lock:
            if tool_name is None:
                self._answers.clear()
            else:
                self._answers = {k: v for k, v in self._answers.items() if k[1] != tool_name}
