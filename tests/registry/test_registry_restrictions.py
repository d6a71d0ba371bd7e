"""``restrict``: every rejection, intersection, exact lifting, and how later
registrations are treated (SPEC section 4)."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors.errors import RegistrationError
from dsh_actors.model import Agent, ToolRestriction

from .helpers import names, tool


@pytest.fixture
def abc(rt: Any) -> Any:
    for name in ("a", "b", "c"):
        rt.tools.register(tool(name))
    return rt


def test_restrict_on_the_global_service_is_rejected(abc: Any) -> None:
    with pytest.raises(RegistrationError, match=r"restrict\(\) needs a scoped service"):
        abc.tools.restrict(ToolRestriction(deny=["a"]))
    assert names(abc.tools.definitions()) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "restriction",
    [ToolRestriction(), ToolRestriction(allow=[], deny=[]), ToolRestriction(allow=[]), ToolRestriction(deny=())],
    ids=["nothing", "both-empty", "empty-allow", "empty-deny"],
)
def test_an_empty_restriction_is_rejected(abc: Any, restriction: ToolRestriction) -> None:
    with pytest.raises(RegistrationError) as err:
        abc.tools.scope(Agent("main")).restrict(restriction)
    assert str(err.value) == (
        'cannot restrict agent "main": the restriction is empty (give allow and/or deny tool names)'
    )


@pytest.mark.parametrize("field", ["allow", "deny"])
def test_a_restriction_naming_run_code_is_rejected(abc: Any, field: str) -> None:
    with pytest.raises(RegistrationError) as err:
        abc.tools.scope(Agent("main")).restrict(ToolRestriction(**{field: ["a", "run_code"]}))
    assert str(err.value) == (
        'cannot restrict agent "main": "run_code" is the reserved code-mode transport and cannot be restricted'
    )


def test_an_unknown_name_is_rejected_with_the_sorted_known_names(rt: Any) -> None:
    for name in ("zeta", "alpha", "mid"):
        rt.tools.register(tool(name))
    with pytest.raises(RegistrationError) as err:
        rt.tools.scope(Agent("main")).restrict(ToolRestriction(allow=["alpha", "nope"], deny=["gone"]))
    assert str(err.value) == (
        'cannot restrict agent "main": unknown tool names "nope", "gone"; '
        'the names it inherits are: "alpha", "mid", "zeta"'
    )


def test_a_scopes_own_names_count_as_unknown_and_the_message_says_why(abc: Any) -> None:
    agent = Agent("main")
    abc.tools.scope(agent).register(tool("own"))
    with pytest.raises(RegistrationError) as err:
        abc.tools.scope(agent).restrict(ToolRestriction(deny=["own"]))
    assert str(err.value) == (
        'cannot restrict agent "main": unknown tool name "own" ("own" is registered in this scope '
        'itself, and a scope\'s own tools are never restricted for the scope itself); the names it inherits are: "a", "b", "c"'
    )


def test_an_ancestors_own_tool_is_inherited_and_may_be_restricted(abc: Any) -> None:
    root = Agent("root")
    child = Agent("child", parent=root)
    abc.tools.scope(root).register(tool("r"))
    abc.tools.scope(child).restrict(ToolRestriction(deny=["r"]))
    assert names(abc.tools.definitions(child)) == ["a", "b", "c"]
    assert names(abc.tools.definitions(root)) == ["a", "b", "c", "r"]


def test_a_name_an_ancestor_restricted_away_is_not_inherited(abc: Any) -> None:
    root = Agent("root")
    child = Agent("child", parent=root)
    abc.tools.scope(root).restrict(ToolRestriction(deny=["a"]))
    with pytest.raises(RegistrationError, match='unknown tool name "a"; the names it inherits are: "b", "c"'):
        abc.tools.scope(child).restrict(ToolRestriction(allow=["a"]))


def test_a_name_with_no_tools_at_all_lists_none(rt: Any) -> None:
    with pytest.raises(RegistrationError, match=r'unknown tool name "x"; the names it inherits are: \(none\)'):
        rt.tools.scope(Agent("main")).restrict(ToolRestriction(deny=["x"]))


def test_a_bare_string_of_names_is_refused(abc: Any) -> None:
    with pytest.raises(TypeError):
        ToolRestriction(allow="abc")


def test_non_string_names_are_rejected(abc: Any) -> None:
    with pytest.raises(RegistrationError, match="allow names must be str"):
        abc.tools.scope(Agent("main")).restrict(ToolRestriction(allow=["a", 3]))  # type: ignore[list-item]


def test_a_rejected_restriction_changes_nothing(abc: Any) -> None:
    agent = Agent("main")
    with pytest.raises(RegistrationError):
        abc.tools.scope(agent).restrict(ToolRestriction(deny=["a", "nope"]))
    assert names(abc.tools.definitions(agent)) == ["a", "b", "c"]


def test_the_filter_is_copied_at_the_call(abc: Any) -> None:
    agent = Agent("main")
    allow = ["a"]
    restriction = ToolRestriction(allow=allow)
    # Even a restriction whose names are a live list (forced in) is copied.
    sneaky = ToolRestriction(deny=["b"])
    live = ["b"]
    object.__setattr__(sneaky, "deny", live)
    abc.tools.scope(agent).restrict(restriction)
    abc.tools.scope(agent).restrict(ToolRestriction(allow=["a", "b"]))
    other = Agent("other")
    abc.tools.scope(other).restrict(sneaky)
    allow.append("b")
    live.clear()
    live.append("c")
    assert names(abc.tools.definitions(agent)) == ["a"]
    assert names(abc.tools.definitions(other)) == ["a", "c"]


def test_allow_keeps_only_the_listed_inherited_tools(abc: Any) -> None:
    agent = Agent("main")
    abc.tools.scope(agent).restrict(ToolRestriction(allow=["a", "c"]))
    assert names(abc.tools.definitions(agent)) == ["a", "c"]
    assert abc.tools.get("b", agent) is None
    assert abc.tools.executable("b", agent) is None


def test_deny_removes_the_listed_inherited_tools(abc: Any) -> None:
    agent = Agent("main")
    abc.tools.scope(agent).restrict(ToolRestriction(deny=["b"]))
    assert names(abc.tools.definitions(agent)) == ["a", "c"]


def test_allow_and_deny_in_one_filter_both_apply(abc: Any) -> None:
    agent = Agent("main")
    abc.tools.scope(agent).restrict(ToolRestriction(allow=["a", "b"], deny=["b"]))
    assert names(abc.tools.definitions(agent)) == ["a"]


def test_several_restrictions_intersect(abc: Any) -> None:
    agent = Agent("main")
    scoped = abc.tools.scope(agent)
    scoped.restrict(ToolRestriction(allow=["a", "b"]))
    scoped.restrict(ToolRestriction(allow=["b", "c"]))
    assert names(scoped.definitions()) == ["b"]
    scoped.restrict(ToolRestriction(deny=["b"]))
    assert names(scoped.definitions()) == []


def test_each_disposer_lifts_only_its_own_restriction(abc: Any) -> None:
    agent = Agent("main")
    scoped = abc.tools.scope(agent)
    lift_ab = scoped.restrict(ToolRestriction(allow=["a", "b"]))
    lift_deny_a = scoped.restrict(ToolRestriction(deny=["a"]))
    assert names(scoped.definitions()) == ["b"]
    lift_ab()
    assert names(scoped.definitions()) == ["b", "c"]
    lift_ab()  # idempotent: the other restriction stays
    assert names(scoped.definitions()) == ["b", "c"]
    lift_deny_a()
    assert names(scoped.definitions()) == ["a", "b", "c"]


def test_two_identical_restrictions_are_lifted_one_at_a_time(abc: Any) -> None:
    agent = Agent("main")
    scoped = abc.tools.scope(agent)
    first = scoped.restrict(ToolRestriction(deny=["a"]))
    scoped.restrict(ToolRestriction(deny=["a"]))
    first()
    assert names(scoped.definitions()) == ["b", "c"]


def test_an_empty_allow_list_beside_a_deny_list_names_nothing_as_when_alone(abc: Any) -> None:
    # An empty list names no tool: alone it is refused as empty (above), and
    # beside a deny list the filter is that deny-only one. (It had hidden
    # every inherited tool.)
    agent = Agent("main")
    abc.tools.scope(agent).restrict(ToolRestriction(allow=[], deny=["a"]))
    assert names(abc.tools.definitions(agent)) == ["b", "c"]
    assert [s["name"] for s in abc.tools.model_tools(agent).schemas] == ["b", "c"]
    abc.tools.register(tool("later"))
    assert names(abc.tools.definitions(agent)) == ["b", "c", "later"]


def test_a_deny_only_filter_admits_inherited_tools_registered_later(abc: Any) -> None:
    agent = Agent("main")
    abc.tools.scope(agent).restrict(ToolRestriction(deny=["a"]))
    abc.tools.register(tool("later"))
    assert names(abc.tools.definitions(agent)) == ["b", "c", "later"]


def test_an_allow_list_excludes_inherited_tools_registered_later(abc: Any) -> None:
    agent = Agent("main")
    root_child = Agent("child", parent=agent)
    abc.tools.scope(agent).restrict(ToolRestriction(allow=["a"]))
    abc.tools.register(tool("later"))
    assert names(abc.tools.definitions(agent)) == ["a"]
    assert names(abc.tools.definitions(root_child)) == ["a"]


def test_an_allow_list_still_shows_the_scopes_own_tools_registered_later(abc: Any) -> None:
    agent = Agent("main")
    scoped = abc.tools.scope(agent)
    scoped.restrict(ToolRestriction(allow=["a"]))
    scoped.register(tool("mine"))
    assert names(scoped.definitions()) == ["a", "mine"]


def test_a_denied_name_stays_denied_when_the_tool_is_registered_again(rt: Any) -> None:
    agent = Agent("main")
    undo = rt.tools.register(tool("c"))
    rt.tools.register(tool("d"))
    rt.tools.scope(agent).restrict(ToolRestriction(deny=["c"]))
    undo()
    again = tool("c")
    rt.tools.register(again)
    assert names(rt.tools.definitions(agent)) == ["d"]
    assert rt.tools.get("c") is again


def test_a_restriction_does_not_affect_other_scopes(abc: Any) -> None:
    a, b = Agent("a"), Agent("b")
    abc.tools.scope(a).restrict(ToolRestriction(deny=["a"]))
    assert names(abc.tools.definitions(b)) == ["a", "b", "c"]
    assert names(abc.tools.definitions()) == ["a", "b", "c"]


def test_names_that_are_not_a_sequence_are_refused_naming_the_field() -> None:
    with pytest.raises(TypeError, match=r"^ToolRestriction.deny must be a sequence of names, not int$"):
        ToolRestriction(deny=5)  # type: ignore[arg-type]


def test_a_tool_set_that_is_not_one_is_refused_naming_where_one_comes_from(abc: Any) -> None:
    # Before: AttributeError: 'int' object has no attribute 'admitted_in'.
    for read in (
        lambda: abc.tools.model_tools(None, 5),
        lambda: abc.tools.definitions(None, 5),
        lambda: abc.tools.schemas(None, 5),
        lambda: abc.tools.get("a", None, 5),
        lambda: abc.tools.executable("a", None, 5),
    ):
        with pytest.raises(
            TypeError, match=r"^tool_set is a ResolvedToolSet \(from rt.tools.resolve\) or None, not int$"
        ):
            read()
