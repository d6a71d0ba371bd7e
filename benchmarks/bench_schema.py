"""Schema validation on the hot path: our compiled validator vs jsonschema.

Validates a small tool-argument object (5 properties, one of them a nested
object) with :func:`dsh_actors.schema.compile_json_schema` and with a compiled
``jsonschema.Draft202012Validator``, in the same run, and prints µs/op
(median over repetitions, after a warm-up) and the ratio to jsonschema.

The full-mode rows validate the same arguments against the schema pydantic
would generate for them (``$defs``/``$ref`` for the nested model,
``anyOf`` for an ``Optional``, ``minimum``, ``minLength``), compiled by
:func:`dsh_actors.schema.compile_full_json_schema`: what a mounted MCP tool
pays per call, next to the subset's cost.

    ./dev python -m benchmarks.bench_schema [--repeat N] [--json PATH]
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable, Sequence
from typing import Any

import jsonschema

from benchmarks._util import bench_main, case_table, time_cases
from dsh_actors.json import materialize
from dsh_actors.schema import compile_full_json_schema, compile_json_schema, validate_json_schema_value

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer"},
        "recursive": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["fast", "thorough"]},
        "options": {
            "type": "object",
            "properties": {"depth": {"type": "number"}, "follow": {"type": "string"}},
            "required": ["depth"],
            "additionalProperties": False,
        },
    },
    "required": ["path", "options"],
    "additionalProperties": False,
}
VALUE: dict[str, Any] = {
    "path": "/src/app.py",
    "limit": 100,
    "recursive": True,
    "mode": "fast",
    "options": {"depth": 2.5, "follow": "links"},
}
INVALID: dict[str, Any] = {"path": 3, "limit": True, "mode": "slow", "options": {"x": 1}}

# The same arguments as pydantic describes them (what MCP servers send).
FULL_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "title": "scanArguments",
    "properties": {
        "path": {"type": "string", "minLength": 1, "title": "Path"},
        "limit": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None},
        "recursive": {"type": "boolean", "default": False},
        "mode": {"type": "string", "enum": ["fast", "thorough"]},
        "options": {"$ref": "#/$defs/Options"},
    },
    "required": ["path", "options"],
    "additionalProperties": False,
    "$defs": {
        "Options": {
            "type": "object",
            "properties": {
                "depth": {"type": "number", "exclusiveMinimum": 0},
                "follow": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            },
            "required": ["depth"],
            "additionalProperties": False,
        }
    },
}


def run(repeat: int = 15) -> dict[str, Any]:
    """Run every case; return the results as a JSON-ready dict."""
    ours = compile_json_schema(SCHEMA)
    theirs = jsonschema.Draft202012Validator(SCHEMA)
    frozen = materialize(VALUE)
    assert ours.is_valid(VALUE) and ours.is_valid(frozen) and theirs.is_valid(VALUE)
    assert not ours.is_valid(INVALID) and not theirs.is_valid(INVALID)
    full = compile_full_json_schema(FULL_SCHEMA, object_root=True)
    assert type(full).__name__ == "FullJsonSchema"
    assert full.is_valid(frozen) and not full.is_valid(materialize(INVALID))
    frozen_invalid = materialize(INVALID)
    cases: dict[str, Callable[[], object]] = {
        "ours is_valid (plain dict)": lambda: ours.is_valid(VALUE),
        "ours is_valid (frozen)": lambda: ours.is_valid(frozen),
        "ours validate (valid)": lambda: ours.validate(frozen),
        "ours validate (invalid, 5 messages)": lambda: ours.validate(INVALID),
        "ours validate_json_schema_value (raw dict schema)": lambda: validate_json_schema_value(SCHEMA, frozen),
        "full mode is_valid (pydantic-style schema, frozen)": lambda: full.is_valid(frozen),
        "full mode validate (invalid, pydantic-style schema)": lambda: full.validate(frozen_invalid),
        "jsonschema is_valid (compiled)": lambda: theirs.is_valid(VALUE),
        "jsonschema iter_errors (invalid)": lambda: list(theirs.iter_errors(INVALID)),
    }
    results = time_cases(((name, fn, None) for name, fn in cases.items()), repeat=repeat, calls_key="calls_per_batch")
    baseline = results["jsonschema is_valid (compiled)"]["median_us"]
    for entry in results.values():
        entry["speedup_vs_jsonschema"] = baseline / entry["median_us"]
    return {
        "benchmark": "schema",
        "python": platform.python_version(),
        "repeat": repeat,
        "results": results,
        "headline": {
            "ours_us": results["ours is_valid (frozen)"]["median_us"],
            "jsonschema_us": baseline,
            "speedup": results["ours is_valid (frozen)"]["speedup_vs_jsonschema"],
            "full_mode_us": results["full mode is_valid (pydantic-style schema, frozen)"]["median_us"],
        },
    }


def _table(report: dict[str, Any]) -> str:
    headline = report["headline"]
    table = case_table(report["results"], ratio_head="x vs jsonschema", ratio_key="speedup_vs_jsonschema")
    return (
        f"{table}\n"
        f"\nsmall object (5 properties, one nested): ours {headline['ours_us']:.2f} µs, "
        f"jsonschema {headline['jsonschema_us']:.2f} µs, {headline['speedup']:.1f}x faster; "
        f"full mode (pydantic-style schema) {headline['full_mode_us']:.2f} µs"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; with ``--json PATH``, also write the report there."""
    return bench_main(argv, doc=__doc__, run=run, table=_table)


if __name__ == "__main__":
    sys.exit(main())
