"""Property: random register / unregister / restrict / lift sequences over a
random scope tree always give every scope the visibility that a plain
reference model, written name by name from SPEC section 4, predicts; and
the registry accepts and rejects exactly the writes the model does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors.errors import RegistrationError
from dsh_actors.model import Agent, ToolRestriction
from dsh_actors.registry import Registration, inherited, visible

from .helpers import tool

NAMES = ("a", "b", "c", "d")
MAX_DEPTH = 3  # levels of agents below the global layer


@st.composite
def scope_trees(draw: st.DrawFn) -> list[int | None]:
    """Parent index of each agent (``None``: a root agent), depth ≤ 3."""
    size = draw(st.integers(3, 6))
    parents: list[int | None] = []
    depths: list[int] = []
    for i in range(size):
        options: list[int | None] = [None, *(j for j in range(i) if depths[j] < MAX_DEPTH - 1)]
        parent = draw(st.sampled_from(options))
        parents.append(parent)
        depths.append(0 if parent is None else depths[parent] + 1)
    return parents


names_or_none = st.one_of(st.none(), st.frozensets(st.sampled_from((*NAMES, "zz")), max_size=3))

operations = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.one_of(st.none(), st.integers(0, 5)), st.sampled_from(NAMES)),
        st.tuples(st.just("unregister"), st.integers(0, 40)),
        st.tuples(st.just("restrict"), st.integers(0, 5), names_or_none, names_or_none),
        st.tuples(st.just("lift"), st.integers(0, 40)),
    ),
    max_size=30,
)


@dataclass
class Model:
    """The registry as plain dicts. Scopes are agent indexes, ``None`` global."""

    parents: list[int | None]
    layers: dict[int | None, dict[str, Any]] = field(default_factory=dict)
    restrictions: dict[int, list[tuple[object, frozenset[str] | None, frozenset[str] | None]]] = field(
        default_factory=dict
    )

    def layer(self, scope: int | None) -> dict[str, Any]:
        return self.layers.setdefault(scope, {})

    def ancestors_nearest_first(self, scope: int) -> list[int]:
        out = []
        node = self.parents[scope]
        while node is not None:
            out.append(node)
            node = self.parents[node]
        return out

    def admitted(self, nodes: list[int], name: str) -> bool:
        for node in nodes:
            for _key, allow, deny in self.restrictions.get(node, []):
                # (An empty allow list names no tool: it filters nothing.)
                if allow and name not in allow:
                    return False
                if deny is not None and name in deny:
                    return False
        return True

    def inherited_token(self, scope: int, name: str, *, own_restrictions: bool) -> Any:
        """What ``scope`` inherits for ``name``: the nearest ancestor that
        registered it, else global; kept only if the restrictions on the
        chain (the ancestors', plus the scope's own if asked) admit it."""
        ancestors = self.ancestors_nearest_first(scope)
        token = None
        for node in ancestors:
            if name in self.layer(node):
                token = self.layer(node)[name]
                break
        else:
            token = self.layer(None).get(name)
        if token is None:
            return None
        nodes = ancestors + [scope] if own_restrictions else ancestors
        return token if self.admitted(nodes, name) else None

    def sees(self, scope: int | None, name: str) -> Any:
        if scope is None:
            return self.layer(None).get(name)
        own = self.layer(scope).get(name)
        if own is not None:
            return own
        return self.inherited_token(scope, name, own_restrictions=True)

    def view(self, scope: int | None) -> dict[str, Any]:
        out = {}
        for name in NAMES:
            token = self.sees(scope, name)
            if token is not None:
                out[name] = token
        return out

    def inherits(self, scope: int, name: str) -> bool:
        return self.inherited_token(scope, name, own_restrictions=False) is not None

    def restriction_ok(self, scope: int, allow: frozenset[str] | None, deny: frozenset[str] | None) -> bool:
        if not allow and not deny:
            return False
        return all(self.inherits(scope, n) for n in (allow or frozenset()) | (deny or frozenset()))


def test_visibility_always_matches_the_reference_model(rt: Any) -> None:
    @settings(max_examples=200, deadline=None)
    @given(parents=scope_trees(), ops=operations)
    def check(parents: list[int | None], ops: list[tuple[Any, ...]]) -> None:
        agents: list[Agent] = []
        for parent in parents:
            agents.append(Agent(f"agent{len(agents)}", parent=None if parent is None else agents[parent]))
        model = Model(parents)
        handles: list[tuple[str, Any, Any, int | None]] = []  # kind, disposer, token, scope

        def agent_of(scope: int | None) -> Agent | None:
            return None if scope is None else agents[scope]

        def compare() -> None:
            for scope in [None, *range(len(agents))]:
                real = dict(visible(rt.state, agent_of(scope)))
                assert real == model.view(scope), f"scope {scope}"
                assert all(isinstance(r, Registration) for r in real.values())
            for index in range(len(agents)):
                expected = {n for n in NAMES if model.inherits(index, n)}
                assert set(inherited(rt.state, agents[index])) == expected

        try:
            for op in ops:
                kind = op[0]
                if kind == "register":
                    _, scope, name = op
                    scope = None if scope is None else scope % len(agents)
                    service = rt.tools.scope(agent_of(scope))
                    if name in model.layer(scope):
                        try:
                            service.register(tool(name))
                        except RegistrationError:
                            pass
                        else:
                            raise AssertionError("a duplicate was accepted")
                    else:
                        undo = service.register(tool(name))
                        token = rt.state.snapshot(agent_of(scope)).registrations[name]
                        model.layer(scope)[name] = token
                        handles.append(("registration", undo, token, scope))
                elif kind == "restrict":
                    _, scope, allow, deny = op
                    scope %= len(agents)
                    restriction = ToolRestriction(
                        allow=None if allow is None else sorted(allow),
                        deny=None if deny is None else sorted(deny),
                    )
                    ok = model.restriction_ok(scope, allow, deny)
                    try:
                        lift = rt.tools.scope(agents[scope]).restrict(restriction)
                    except RegistrationError:
                        assert not ok, f"rejected {restriction} in {scope}"
                    else:
                        assert ok, f"accepted {restriction} in {scope}"
                        key = object()
                        model.restrictions.setdefault(scope, []).append((key, allow, deny))
                        handles.append(("restriction", lift, key, scope))
                else:
                    wanted = "registration" if kind == "unregister" else "restriction"
                    mine = [h for h in handles if h[0] == wanted]
                    if not mine:
                        continue
                    _, undo, token, scope = mine[op[1] % len(mine)]
                    undo()
                    if wanted == "registration":
                        layer = model.layer(scope)
                        for name, held in list(layer.items()):
                            if held is token:
                                del layer[name]
                    else:
                        model.restrictions[scope] = [r for r in model.restrictions[scope] if r[0] is not token]
                compare()
        finally:
            for _, undo, _, _ in reversed(handles):
                undo()
        assert dict(visible(rt.state, None)) == {}

    check()
