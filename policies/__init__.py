"""Policies: plugins on the pipeline's waterfalls (``docs/reference.md``,
section 12).

Each module is itself a plugin (``apply(rt, **config) -> disposer``)::

    import policies

    rt.use(policies.retry, tools=("fetch",))       # retry outside timeout ...
    rt.use(policies.timeout)                       # ... so each attempt has its deadline
    rt.use(policies.spill, directory=path, max_inline_bytes=16384)
    rt.use(policies.approval, service=policies.approval.TerminalPrompt())
    metrics = policies.metrics.install(rt)         # last: it prepends its listeners
    rt.use(policies.otel)                          # spans and a duration histogram (the otel extra)

They use only what ``dsh_actors`` exports. Like the core they log through
loguru, disabled at import: ``logger.enable("policies")`` turns it on.
"""

# (Logging: the core's import, which every module here makes first, disables
# "policies" and keeps what the application chose before: see dsh_actors' docstring.)

from . import approval, metrics, otel, retry, spill, timeout

__all__ = ["approval", "metrics", "otel", "retry", "spill", "timeout"]
