"""Optional executors for dsh-actors (``docs/reference.md``, section 1): each uses only the
names ``dsh_actors`` exports. ``executors.ptc.PtcExecutor`` runs tools from
model-written programs (``run_code``); ``executors.ray.RayExecutor`` runs
chosen tool bodies on a Ray cluster (the ``ray`` extra).

Like the core they log through loguru, disabled at import:
``logger.enable("executors")`` turns it on."""

# (Logging: the core's import, which every module here makes first, disables
# "executors" and keeps what the application chose before: see dsh_actors' docstring.)
