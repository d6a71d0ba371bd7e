"""EventBus.observed: the executor's per-call "does anyone listen" check
must agree with listeners() for every scope arrangement."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dsh_actors import Agent
from dsh_actors.events import EventBus

ROOT = Agent("root")
CHILD = Agent("child", parent=ROOT)
OTHER = Agent("other")
AGENTS = [None, ROOT, CHILD, OTHER]
NAMES = ["tools/pre-execute", "tools/post-execute", "tools/result", "tools/change"]


@given(
    subscriptions=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(AGENTS)), max_size=6),
    asked=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
    agent=st.sampled_from(AGENTS),
    dispose=st.integers(0, 6),
)
def test_observed_agrees_with_listeners(subscriptions, asked, agent, dispose) -> None:  # type: ignore[no-untyped-def]
    bus = EventBus()
    offs = [bus.on(name, lambda *a: None, scope=scope) for name, scope in subscriptions]
    for off in offs[:dispose]:
        off()
    expected = any(bus.listeners(name, agent) for name in asked)
    assert bus.observed(tuple(asked), agent) is expected


def test_observed_with_no_listener_at_all_is_false() -> None:
    bus = EventBus()
    assert bus.observed(("tools/result",)) is False
    off = bus.on("tools/result", lambda *a: None, scope=CHILD)
    assert bus.observed(("tools/result",), ROOT) is False
    assert bus.observed(("tools/result",), CHILD) is True
    off()
    assert bus.observed(("tools/result",), CHILD) is False
