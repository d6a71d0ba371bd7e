"""Optional executors for dsh-actors (SPEC section 1): each uses only the
names ``dsh_actors`` exports. ``executors.ptc.PtcExecutor`` runs tools from
model-written programs (``run_code``); ``executors.ray.RayExecutor`` runs
chosen tool bodies on a Ray cluster (the ``ray`` extra)."""
