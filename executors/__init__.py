"""Optional executors for dsh-actors (``docs/reference.md``, section 1): each uses only the
names ``dsh_actors`` exports. ``executors.ptc.PtcExecutor`` runs tools from
model-written programs (``run_code``); ``executors.ray.RayExecutor`` runs
chosen tool bodies on a Ray cluster (the ``ray`` extra).

Like the core they log through loguru, disabled at import:
``logger.enable("executors")`` turns it on."""

import dsh_actors as _core  # noqa: F401  # (its import disables this package's logging: see its docstring)
