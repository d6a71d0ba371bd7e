"""One call's trip: the stage functions the executors run."""

from .stages import Call, CallPhase, begin, dispatch, finalize, prepare

__all__ = ["Call", "CallPhase", "begin", "dispatch", "finalize", "prepare"]
