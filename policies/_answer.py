"""Answers of approval services: the vocabulary the core understands and
whether the user asked to make an answer permanent. Private to
``policies``; :mod:`policies.approval` re-exports the public names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from dsh_actors import ApprovalRequest

__all__ = ["ALLOWED_ONCE", "CANCELLED", "REJECTED", "UNAVAILABLE", "Answer", "Service", "decide"]

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
