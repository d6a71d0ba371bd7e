"""One call's trip: the stage functions the executors run."""

from .stages import Call, begin, dispatch, finalize, prepare, run_inline

__all__ = ["Call", "begin", "dispatch", "finalize", "prepare", "run_inline"]
