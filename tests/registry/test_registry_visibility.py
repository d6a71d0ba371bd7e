"""Visibility along the scope chain, shadowing, registration rules, and the
read functions' shapes (SPEC section 4)."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors.definition import ToolOutput
from dsh_actors.errors import RegistrationError
from dsh_actors.model import Agent, ToolRestriction
from dsh_actors.registry import Registration, definitions, executable, lookup, schemas, visible

from .helpers import names, raw_tool, tool


def test_a_global_tool_is_visible_to_the_global_view_and_every_agent(rt: Any) -> None:
    root = Agent("root")
    leaf = Agent("leaf", parent=Agent("mid", parent=root))
    rt.tools.register(tool("a"))
    assert rt.tools.get("a") is not None
    assert rt.tools.get("a", root) is rt.tools.get("a")
    assert rt.tools.get("a", leaf) is rt.tools.get("a")


def test_a_scoped_tool_is_visible_to_its_scope_and_descendants_only(rt: Any) -> None:
    root = Agent("root")
    child = Agent("child", parent=root)
    sibling = Agent("sibling")
    rt.tools.scope(root).register(tool("mine"))
    assert rt.tools.get("mine", root) is not None
    assert rt.tools.get("mine", child) is not None
    assert rt.tools.get("mine") is None
    assert rt.tools.get("mine", sibling) is None


def test_a_scoped_service_reads_from_its_own_scope_by_default(rt: Any) -> None:
    agent = Agent("a")
    scoped = rt.tools.scope(agent)
    scoped.register(tool("mine"))
    assert scoped.get("mine") is not None
    assert scoped.get("mine", None) is None  # None is the global view
    assert names(scoped.definitions()) == ["mine"]
    assert names(rt.tools.definitions()) == []


def test_a_nearer_ancestor_shadows_a_farther_one_and_global(rt: Any) -> None:
    root = Agent("root")
    mid = Agent("mid", parent=root)
    leaf = Agent("leaf", parent=mid)
    g, r, m = tool("x"), tool("x"), tool("x")
    rt.tools.register(g)
    rt.tools.scope(root).register(r)
    rt.tools.scope(mid).register(m)
    assert rt.tools.get("x") is g
    assert rt.tools.get("x", root) is r
    assert rt.tools.get("x", mid) is m
    assert rt.tools.get("x", leaf) is m


@pytest.mark.parametrize("global_first", [True, False])
def test_a_scoped_registration_shadows_a_global_one_whichever_was_registered_first(rt: Any, global_first: bool) -> None:
    agent = Agent("a")
    g, s = tool("x"), tool("x")
    if global_first:
        rt.tools.register(g)
        rt.tools.scope(agent).register(s)
    else:
        rt.tools.scope(agent).register(s)
        rt.tools.register(g)
    assert rt.tools.get("x", agent) is s
    assert rt.tools.get("x") is g


def test_unregistering_the_shadowing_tool_uncovers_the_inherited_one(rt: Any) -> None:
    agent = Agent("a")
    g, s = tool("x"), tool("x")
    rt.tools.register(g)
    undo = rt.tools.scope(agent).register(s)
    undo()
    assert rt.tools.get("x", agent) is g


def test_own_registrations_are_not_hidden_by_the_scopes_restrictions(rt: Any) -> None:
    agent = Agent("a")
    rt.tools.register(tool("g"))
    rt.tools.register(tool("x"))
    scoped = rt.tools.scope(agent)
    own = tool("x")
    scoped.register(own)
    scoped.restrict(ToolRestriction(allow=["g"]))
    assert names(scoped.definitions()) == ["g", "x"]
    assert scoped.get("x") is own


def test_an_ancestors_restriction_reaches_its_descendants(rt: Any) -> None:
    root = Agent("root")
    child = Agent("child", parent=root)
    grandchild = Agent("grandchild", parent=child)
    rt.tools.register(tool("a"))
    rt.tools.register(tool("b"))
    rt.tools.scope(root).restrict(ToolRestriction(deny=["a"]))
    assert names(rt.tools.definitions(child)) == ["b"]
    assert names(rt.tools.definitions(grandchild)) == ["b"]
    # A descendant's own registration of the name is visible to it, but what
    # the grandchild inherits from it is still filtered by root's restriction.
    rt.tools.scope(child).register(tool("a"))
    assert names(rt.tools.definitions(child)) == ["b", "a"]
    assert names(rt.tools.definitions(grandchild)) == ["b"]


def test_an_ancestors_allow_list_also_filters_the_ancestors_own_tools_for_descendants(rt: Any) -> None:
    # SPEC section 4, literally: every restriction on the chain filters what
    # the viewer inherits, and an ancestor's own tools are inherited.
    root = Agent("root")
    child = Agent("child", parent=root)
    rt.tools.register(tool("g"))
    rt.tools.scope(root).register(tool("own"))
    rt.tools.scope(root).restrict(ToolRestriction(allow=["g"]))
    assert names(rt.tools.definitions(root)) == ["g", "own"]
    assert names(rt.tools.definitions(child)) == ["g"]


def test_reads_list_tools_in_registration_order(rt: Any) -> None:
    agent = Agent("a")
    rt.tools.register(tool("c"))
    rt.tools.scope(agent).register(tool("a"))
    rt.tools.register(tool("b"))
    assert names(rt.tools.definitions(agent)) == ["c", "a", "b"]
    assert names(rt.tools.schemas(agent)) == ["c", "a", "b"]


def test_the_read_functions_return_registrations_with_their_compiled_validators(rt: Any) -> None:
    agent = Agent("a")
    defn = tool("x")
    rt.tools.scope(agent).register(defn)
    reg = executable(rt.state, "x", agent, None)
    assert isinstance(reg, Registration)
    assert reg.definition is defn and reg.scope is agent and not reg.conditional
    assert reg.output_validator.is_valid("text") and not reg.output_validator.is_valid(3)
    assert lookup(rt.state, "x", agent) is reg
    assert visible(rt.state, agent)["x"] is reg
    assert definitions(rt.state, agent) == [defn]
    assert schemas(rt.state, agent)[0]["name"] == "x"
    assert executable(rt.state, "x", None) is None


def test_repeated_reads_without_changes_return_the_cached_view(rt: Any) -> None:
    agent = Agent("a")
    rt.tools.register(tool("x"))
    first = visible(rt.state, agent)
    assert visible(rt.state, agent) is first
    rt.tools.register(tool("y"))
    assert visible(rt.state, agent) is not first
    assert list(visible(rt.state, agent)) == ["x", "y"]


# -- schemas ---------------------------------------------------------------


def test_schemas_hold_exactly_name_description_and_parameters(rt: Any) -> None:
    defn = raw_tool(
        "x",
        is_concurrency_safe=lambda args: True,
        timeout_ms=500,
        meta={"idempotent": True},
        present_call=lambda args: None,
    )
    rt.tools.register(defn)
    (schema,) = rt.tools.schemas()
    assert schema == {
        "name": "x",
        "description": "the raw x tool",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    assert type(schema["parameters"]) is dict
    assert type(schema["parameters"]["properties"]) is dict


def test_schemas_are_detached_from_the_registry_and_from_the_callers_dict(rt: Any) -> None:
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}}
    rt.tools.register(raw_tool("x", parameters=parameters))
    parameters["properties"]["q"]["type"] = "integer"  # the caller's dict changes later
    first = rt.tools.schemas()
    first[0]["parameters"]["properties"]["q"]["type"] = "boolean"
    first[0]["name"] = "renamed"
    second = rt.tools.schemas()
    assert second[0]["name"] == "x"
    assert second[0]["parameters"]["properties"]["q"] == {"type": "string"}
    assert second[0] is not first[0]


# -- registration rules ----------------------------------------------------


def test_run_code_is_a_reserved_name(rt: Any) -> None:
    with pytest.raises(RegistrationError) as err:
        rt.tools.register(tool("run_code"))
    assert str(err.value) == (
        'cannot register tool "run_code": "run_code" is reserved for the code-mode transport; give the tool another name'
    )
    with pytest.raises(RegistrationError):
        rt.tools.scope(Agent("a")).register(tool("run_code"))


def test_a_duplicate_name_in_the_same_layer_is_rejected(rt: Any) -> None:
    rt.tools.register(tool("x"))
    with pytest.raises(RegistrationError) as err:
        rt.tools.register(tool("x"))
    said = str(err.value)
    assert said.startswith('cannot register tool "x": a tool with this name is already registered in the global scope')
    # The ways out: dispose of the first, rename this one, or shadow it from an agent's scope.
    for fix in (
        "the disposer the first register() returned to register_all([definition], replacing=[disposer])",
        "@tool(name=...)",
        "rt.tools.scope(agent).register(",
    ):
        assert fix in said, said
    agent = Agent("main")
    rt.tools.scope(agent).register(tool("y"))
    with pytest.raises(RegistrationError, match='already registered in agent "main"') as err:
        rt.tools.scope(agent).register(tool("y"))
    assert "the disposer the first register() returned" in str(err.value)
    assert "a sub-agent's scope" in str(err.value)


def test_the_ways_out_a_duplicate_name_names_work(rt: Any) -> None:
    undo = rt.tools.register(tool("x"))
    newer = tool("x")
    rt.tools.register_all([newer], replacing=[undo])  # the disposer, replaced in one change
    assert rt.tools.get("x") is newer
    rt.tools.register(tool("x2"))  # another name
    agent = Agent("main")
    rt.tools.scope(agent).register(tool("x"))  # an agent's scope shadows the global one
    rt.tools.scope(Agent("sub", parent=agent)).register(tool("x"))  # a sub-agent's shadows its parent's


def test_the_same_name_in_different_layers_is_not_a_duplicate(rt: Any) -> None:
    a, b = Agent("a"), Agent("b")
    rt.tools.register(tool("x"))
    rt.tools.scope(a).register(tool("x"))
    rt.tools.scope(b).register(tool("x"))
    assert len({id(rt.tools.get("x", s)) for s in (None, a, b)}) == 3


def test_a_name_can_be_registered_again_after_its_disposer_ran(rt: Any) -> None:
    undo = rt.tools.register(tool("x"))
    undo()
    again = tool("x")
    rt.tools.register(again)
    assert rt.tools.get("x") is again


def test_registration_reports_every_problem_of_a_definition_at_once(rt: Any) -> None:
    bad = raw_tool(
        "bad",
        output=None,
        parameters={"type": "object", "properties": {"a": {"anyOf": []}}},
        timeout_ms=-1,
    )
    with pytest.raises(RegistrationError) as err:
        rt.tools.register(bad)
    message = str(err.value)
    assert message.startswith('cannot register tool "bad": ')
    assert "output is required" in message
    assert "parameters:" in message
    assert "timeout_ms must be a positive finite number (got -1)" in message
    assert rt.tools.get("bad") is None


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"output": ToolOutput(schema={"type": "strin"}, render=lambda a, v: [])}, "output.schema"),
        ({"timeout_ms": float("inf")}, "timeout_ms must be a positive finite number"),
        ({"timeout_ms": 0}, "timeout_ms must be a positive finite number"),
        ({"timeout_ms": 10**400}, "timeout_ms must be a positive finite number \\(got an int of 1329 bits\\)"),
        ({"parameters": {"type": "string"}}, "parameters"),
        ({"execute": None}, "execute must be callable"),
    ],
)
def test_registration_rejects_what_validate_definition_rejects(rt: Any, fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(RegistrationError, match=problem) as err:
        rt.tools.register(raw_tool("t", **fields))
    assert err.value.tool == "t"


def test_the_reserved_name_is_reported_together_with_the_definitions_problems(rt: Any) -> None:
    with pytest.raises(RegistrationError) as err:
        rt.tools.register(raw_tool("run_code", timeout_ms=-5))
    assert '"run_code" is reserved' in str(err.value)
    assert "timeout_ms" in str(err.value)


def test_something_that_is_not_a_definition_is_rejected(rt: Any) -> None:
    with pytest.raises(RegistrationError, match="expected a ToolDefinition, got dict"):
        rt.tools.register({"name": "x"})


def test_when_must_be_callable_or_none(rt: Any) -> None:
    with pytest.raises(
        RegistrationError, match=r'cannot register tool "x": when must be callable or None \(got bool\)'
    ):
        rt.tools.register(tool("x"), when=True)
    assert rt.tools.get("x") is None


# --------------------------------------------------------------------------
# The per-generation view cache never owns an agent
# --------------------------------------------------------------------------


def test_dropped_agents_and_their_sessions_are_freed_before_the_next_registry_write(rt: Any) -> None:
    import gc
    import weakref

    from dsh_actors.model import LogStep, ToolBatchInput, ToolCall
    from dsh_actors.session import Session

    rt.tools.register(tool("echo", is_concurrency_safe=lambda args: True))
    generation = rt.state.generation
    agents: list[weakref.ref[Agent]] = []
    sessions: list[weakref.ref[Session]] = []
    for i in range(3000):
        agent = Agent(f"a{i}", session=Session())
        result = rt.tools.execute(
            ToolBatchInput(calls=[ToolCall(f"c{i}", "echo", "{}")], agent=agent, log=LogStep(turn=1, step=1))
        )
        assert not result.results[0].result.is_error
        agents.append(weakref.ref(agent))
        sessions.append(weakref.ref(agent.session))  # type: ignore[arg-type]
        del agent, result
    gc.collect()
    assert rt.state.generation == generation, "no registry write happened meanwhile"
    assert sum(ref() is not None for ref in agents) == 0
    assert sum(ref() is not None for ref in sessions) == 0
    # The cache still works, and an id reused by a new agent is not mistaken
    # for a dropped one's.
    fresh = Agent("fresh")
    rt.tools.scope(fresh).register(tool("own"))
    assert names(rt.tools.definitions(fresh)) == ["echo", "own"]
    assert names(rt.tools.definitions(Agent("other"))) == ["echo"]


def test_the_view_cache_recognises_the_same_agent_and_never_a_new_one_with_a_reused_id(rt: Any) -> None:
    rt.tools.register(tool("g"))
    keep = Agent("keep")
    rt.tools.scope(keep).register(tool("mine"))
    first = visible(rt.state, keep)
    assert visible(rt.state, keep) is first, "a repeated read is a cache hit"
    for _ in range(50):  # CPython reuses a freed object's id at once, often
        other = Agent("other")
        assert list(visible(rt.state, other)) == ["g"]
        del other
    assert list(visible(rt.state, keep)) == ["g", "mine"]


def test_a_farm_of_more_agents_than_the_view_cache_holds_still_finds_the_views_it_computed_last(
    rt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (A full cache was emptied whole: past its limit, a farm's agents
    # computed their views again and again.)
    from dsh_actors import visibility

    computed: list[Agent | None] = []
    compute = visibility._compute_view

    def counting(scopes: Any, agent: Agent | None) -> Any:
        computed.append(agent)
        return compute(scopes, agent)

    monkeypatch.setattr(visibility, "_compute_view", counting)
    rt.tools.register(tool("g"))
    limit = visibility._CACHE_LIMIT
    farm = [Agent(f"a{i}") for i in range(limit + 904)]
    rt.tools.scope(farm[-1]).register(tool("own"))
    for agent in farm:
        visible(rt.state, agent)
    assert len(computed) == len(farm)
    computed.clear()
    recent = farm[-limit:]
    for agent in recent:
        assert list(visible(rt.state, agent)) == (["g", "own"] if agent is farm[-1] else ["g"])
    assert computed == [], "the views computed last are still cached"
    assert list(visible(rt.state, farm[0])) == ["g"]
    assert computed == [farm[0]], "the view computed longest ago went"
    # A registry change still drops them all.
    rt.tools.register(tool("h"))
    computed.clear()
    assert list(visible(rt.state, farm[-1])) == ["g", "own", "h"]
    assert computed == [farm[-1]]


def test_get_and_executable_refuse_a_name_that_is_not_a_str(rt: Any) -> None:
    from dsh_actors import InvalidTypeError

    for method in (rt.tools.get, rt.tools.executable):
        for name in (["a"], 5, None):
            with pytest.raises(InvalidTypeError, match="a tool's name is a str, not"):
                method(name)
