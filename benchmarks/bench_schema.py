"""Schema validation on the hot path: our compiled validator vs jsonschema.

Validates a small tool-argument object (5 properties, one of them a nested
object) with :func:`dsh_actors.schema.compile_json_schema` and with a compiled
``jsonschema.Draft202012Validator``, in the same run, and prints µs/op
(median over repetitions, after a warm-up) and the ratio to jsonschema.

The full-mode rows validate 6-field arguments against the schema pydantic
would generate for them (``$defs``/``$ref`` for the nested model,
``anyOf`` with null for an ``Optional``, ``minimum``, ``pattern``,
``minLength``), compiled by :func:`dsh_actors.schema.compile_full_json_schema`
(jsonschema-rs): what a mounted MCP tool pays per call, next to jsonschema
on the same schema and the subset's cost. Target: ``full.pydantic_6_fields_us``
<= 5. The report also gives full mode's agreement with the official
JSON-Schema-Test-Suite, draft 2020-12 required files (``suite.*``; target
``suite.agree_pct`` >= 99).

    ./dev python -m benchmarks.bench_schema [--repeat N] [--json PATH]
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsonschema

from benchmarks._util import bench_main, case_table, time_cases
from dsh_actors.errors import JsonSchemaError
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
FULL_VALUE: dict[str, Any] = {**VALUE, "branch": "main"}
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
        "branch": {"type": "string", "pattern": "^[a-z][a-z0-9_-]*$", "title": "Branch"},
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


SUITE = Path(__file__).resolve().parent.parent / "tests" / "schema" / "suite" / "draft2020-12"
#: Set aside: remote references are refused at registration (refRemote.json),
#: and formats are asserted where format.json tests the annotation default.
SUITE_ASIDE = frozenset({"refRemote.json", "format.json"})


def _needs_remote(message: str) -> bool:
    return "remote reference" in message or "localhost:1234" in message


def suite_agreement(suite: Path = SUITE) -> dict[str, Any]:
    """Full mode on the JSON-Schema-Test-Suite's draft 2020-12 required
    files (vendored in tests/schema/suite). A case agrees when the verdicts
    of ``is_valid`` and ``validate`` are the suite's. Groups whose schema
    registration refuses because it references one of the suite's remote
    documents are counted apart (``remote_cases``); any other refused group
    counts each of its cases as a disagreement."""
    files = agree = cases = remote_cases = 0
    disagreements: list[str] = []
    remote_groups: list[str] = []
    for path in sorted(suite.glob("*.json")):
        if path.name in SUITE_ASIDE:
            continue
        files += 1
        for group in json.loads(path.read_text(encoding="utf-8")):
            tests: list[dict[str, Any]] = group["tests"]
            where = f"{path.name}: {group['description']}"
            try:
                compiled = compile_full_json_schema(group["schema"])
            except JsonSchemaError as err:
                if _needs_remote(err.message):
                    remote_cases += len(tests)
                    remote_groups.append(f"{where}: {err.message}")
                else:
                    cases += len(tests)
                    disagreements.append(f"{where}: refused ({err.message})")
                continue
            for case in tests:
                cases += 1
                value = materialize(case["data"])
                if compiled.is_valid(value) is case["valid"] and (compiled.validate(value) == []) is case["valid"]:
                    agree += 1
                else:
                    disagreements.append(f"{where}: {case['description']}")
    all_cases = cases + remote_cases
    return {
        "files": files,
        "cases": cases,
        "agree": agree,
        "agree_pct": 100.0 * agree / cases if cases else 0.0,
        "remote_cases": remote_cases,
        "agree_pct_with_remote_cases": 100.0 * agree / all_cases if all_cases else 0.0,
        "disagreements": disagreements,
        "remote_groups": remote_groups,
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
    full_frozen = materialize(FULL_VALUE)
    theirs_full = jsonschema.Draft202012Validator(FULL_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert full.is_valid(full_frozen) and theirs_full.is_valid(FULL_VALUE)
    assert not full.is_valid(materialize(INVALID))
    frozen_invalid = materialize(INVALID)
    cases: dict[str, Callable[[], object]] = {
        "ours is_valid (plain dict)": lambda: ours.is_valid(VALUE),
        "ours is_valid (frozen)": lambda: ours.is_valid(frozen),
        "ours validate (valid)": lambda: ours.validate(frozen),
        "ours validate (invalid, 5 messages)": lambda: ours.validate(INVALID),
        "ours validate_json_schema_value (raw dict schema)": lambda: validate_json_schema_value(SCHEMA, frozen),
        "full mode is_valid (pydantic-style schema, frozen)": lambda: full.is_valid(full_frozen),
        "full mode validate (invalid, pydantic-style schema)": lambda: full.validate(frozen_invalid),
        "jsonschema is_valid (pydantic-style schema)": lambda: theirs_full.is_valid(FULL_VALUE),
        "jsonschema is_valid (compiled)": lambda: theirs.is_valid(VALUE),
        "jsonschema iter_errors (invalid)": lambda: list(theirs.iter_errors(INVALID)),
    }
    results = time_cases(((name, fn, None) for name, fn in cases.items()), repeat=repeat, calls_key="calls_per_batch")
    baseline = results["jsonschema is_valid (compiled)"]["median_us"]
    for entry in results.values():
        entry["speedup_vs_jsonschema"] = baseline / entry["median_us"]
    full_us = results["full mode is_valid (pydantic-style schema, frozen)"]["median_us"]
    jsonschema_full_us = results["jsonschema is_valid (pydantic-style schema)"]["median_us"]
    suite = suite_agreement()
    return {
        "benchmark": "schema",
        "python": platform.python_version(),
        "repeat": repeat,
        "results": results,
        "headline": {
            "ours_us": results["ours is_valid (frozen)"]["median_us"],
            "jsonschema_us": baseline,
            "speedup": results["ours is_valid (frozen)"]["speedup_vs_jsonschema"],
            "full_mode_us": full_us,
        },
        "full.pydantic_6_fields_us": full_us,
        "full.jsonschema_us": jsonschema_full_us,
        "full.speedup_vs_jsonschema": jsonschema_full_us / full_us,
        "full.target_us": 5.0,
        "full.target_met": full_us <= 5.0,
        "suite.files": suite["files"],
        "suite.cases": suite["cases"],
        "suite.agree": suite["agree"],
        "suite.agree_pct": suite["agree_pct"],
        "suite.remote_cases": suite["remote_cases"],
        "suite.agree_pct_with_remote_cases": suite["agree_pct_with_remote_cases"],
        "suite.target_met": suite["agree_pct"] >= 99.0,
    }


def _table(report: dict[str, Any]) -> str:
    headline = report["headline"]
    table = case_table(report["results"], ratio_head="x vs jsonschema", ratio_key="speedup_vs_jsonschema")
    return (
        f"{table}\n"
        f"\nsmall object (5 properties, one nested): ours {headline['ours_us']:.2f} µs, "
        f"jsonschema {headline['jsonschema_us']:.2f} µs, {headline['speedup']:.1f}x faster; "
        f"full mode (pydantic-style schema, 6 fields) {report['full.pydantic_6_fields_us']:.2f} µs "
        f"(target <= 5), jsonschema {report['full.jsonschema_us']:.2f} µs, "
        f"{report['full.speedup_vs_jsonschema']:.0f}x faster\n"
        f"JSON-Schema-Test-Suite draft 2020-12: {report['suite.agree']}/{report['suite.cases']} cases agree "
        f"({report['suite.agree_pct']:.2f}%, target >= 99); {report['suite.remote_cases']} more need a remote "
        f"document and are refused ({report['suite.agree_pct_with_remote_cases']:.2f}% counting them)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; with ``--json PATH``, also write the report there."""
    return bench_main(argv, doc=__doc__, run=run, table=_table)


if __name__ == "__main__":
    sys.exit(main())
