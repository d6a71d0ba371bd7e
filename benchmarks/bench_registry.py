"""Registry reads: ``get`` and ``schemas`` on a 200-tool registry seen from
the leaf of a 5-deep scope chain.

The registry holds 100 global tools and 20 tools in each of the 5 scopes of
the chain (some shadowing inherited names), with a deny-only restriction on
two of the scopes. Reads go through published snapshots and never hop to an
actor thread; for scale, the same run times a plain dict lookup and one
round trip to the registry actor (what a read would cost if it asked).
Prints median and best µs per op over repetitions, after a warm-up.

    ./dev python -m benchmarks.bench_registry [--repeat N] [--json PATH]
"""

from __future__ import annotations

import copy
import platform
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks._util import Case, bench_main, case_table, time_cases
from dsh_actors.definition import ToolOutput, define_tool
from dsh_actors.messages import Retract
from dsh_actors.model import Agent, ToolRestriction, text
from dsh_actors.registry import Contribution, executable, lookup, schemas, visible
from dsh_actors.runtime import ToolRuntime

PARAMETERS: dict[str, Any] = {
    "path": {"type": "string", "required": True, "description": "file to read"},
    "limit": {"type": "integer", "description": "lines"},
    "mode": {"type": "string", "enum": ["fast", "full"]},
    "options": {
        "type": "object",
        "additional_properties": False,
        "properties": {"follow": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}}},
    },
}
OUTPUT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])
DEPTH = 5
GLOBAL_TOOLS = 100
TOOLS_PER_SCOPE = 20


def _tool(name: str) -> Any:
    return define_tool(
        name=name,
        description=f"The {name} tool: reads things.",
        parameters=PARAMETERS,
        output=OUTPUT,
        execute=lambda args, ctx: name,
        is_concurrency_safe=lambda args: True,
    )


def _populate(rt: ToolRuntime) -> Agent:
    for i in range(GLOBAL_TOOLS):
        rt.tools.register(_tool(f"global_{i}"))
    agent: Agent | None = None
    for level in range(DEPTH):
        agent = Agent(f"level{level}", parent=agent)
        scoped = rt.tools.scope(agent)
        for i in range(TOOLS_PER_SCOPE):
            # a few names shadow what the level above registered
            name = f"level{level - 1}_{i}" if level and i < 3 else f"level{level}_{i}"
            scoped.register(_tool(name))
        if level in (1, 3):
            scoped.restrict(ToolRestriction(deny=[f"global_{level}"]))
    assert agent is not None
    return agent


def run(repeat: int = 15) -> dict[str, Any]:
    """Run every case; return the results as a JSON-ready dict."""
    with ToolRuntime() as rt:
        leaf = _populate(rt)
        state = rt.state
        registered = sum(len(s.registrations) for s in state.scopes.values())
        seen = len(visible(state, leaf))
        name = "global_50"
        plain = {f"t{i}": i for i in range(200)}
        nowhere = Contribution(kind="guard", scope=Agent("nowhere"), value=None, seq=0)
        one_schema = schemas(state, leaf)[0]

        def cold_visible() -> object:
            state._bump()  # as after any publication: the per-agent view is recomputed
            return visible(state, leaf)

        cases: list[Case] = [
            ("baseline: dict lookup", lambda: plain.get("t50"), None),
            (
                "baseline: registry actor round trip",
                lambda: rt.registry.ask(Retract(contribution=nowhere), timeout=30),
                None,
            ),
            ("baseline: deepcopy 200 schemas", lambda: [copy.deepcopy(one_schema) for _ in range(seen)], None),
            ("rt.tools.get(name, leaf)", lambda: rt.tools.get(name, leaf), "baseline: dict lookup"),
            ("lookup(state, name, leaf)", lambda: lookup(state, name, leaf), "baseline: dict lookup"),
            ("executable(state, name, leaf)", lambda: executable(state, name, leaf), "baseline: dict lookup"),
            ("rt.tools.get(name) global view", lambda: rt.tools.get(name), "baseline: dict lookup"),
            ("rt.tools.definitions(leaf)", lambda: rt.tools.definitions(leaf), None),
            (
                "rt.tools.schemas(leaf)",
                lambda: rt.tools.schemas(leaf),
                "baseline: deepcopy 200 schemas",
            ),
            ("visible(state, leaf) after a change", cold_visible, None),
        ]
        results = time_cases(cases, repeat=repeat)
    return {
        "benchmark": "registry",
        "python": platform.python_version(),
        "registered_tools": registered,
        "visible_from_leaf": seen,
        "chain_depth": DEPTH,
        "repeat": repeat,
        "results": results,
    }


def _table(report: dict[str, Any]) -> str:
    return case_table(
        report["results"],
        header_lines=[
            f"{report['registered_tools']} registered tools, {report['visible_from_leaf']} visible "
            f"from the leaf of a {report['chain_depth']}-deep chain"
        ],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; with ``--json PATH``, also write the report there."""
    return bench_main(argv, doc=__doc__, run=run, table=_table)


if __name__ == "__main__":
    sys.exit(main())
