"""policies.timeout.applied(rt): whether the timeout policy is applied to a
runtime (the command line's ``run`` applies it only when it is not)."""

from __future__ import annotations

from typing import Any

import policies


def test_applied_follows_the_policy_from_apply_to_its_disposer(rt: Any) -> None:
    assert not policies.timeout.applied(rt)
    dispose = rt.use(policies.timeout)
    assert policies.timeout.applied(rt)
    dispose()
    assert not policies.timeout.applied(rt)


def test_applied_tells_the_policy_from_other_execute_wrappers(rt: Any) -> None:
    rt.events.on("tools/execute", lambda execution, next_: next_())
    rt.use(policies.retry, tools=("fetch",))
    assert not policies.timeout.applied(rt)
    rt.use(policies.timeout, prepend=True)  # outermost or innermost alike
    assert policies.timeout.applied(rt)
