"""Schema validation on the hot path: our compiled validator vs jsonschema.

Validates a small tool-argument object (5 properties, one of them a nested
object) with :func:`dsh_actors.schema.compile_json_schema` and with a compiled
``jsonschema.Draft202012Validator``, in the same run, and prints µs/op
(median over repetitions, after a warm-up) and the ratio to jsonschema.

    ./dev python -m benchmarks.bench_schema [--repeat N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jsonschema

from dsh_actors.json import materialize
from dsh_actors.schema import compile_json_schema, validate_json_schema_value

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


def _per_op_us(
    fn: Callable[[], object], *, repeat: int, target_s: float = 0.02
) -> dict[str, float]:
    """Median and best µs per call of ``fn`` over ``repeat`` timed batches,
    each batch sized to run about ``target_s`` seconds, after a warm-up."""
    number = 1
    while True:  # warm-up and calibration
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= target_s / 4:
            break
        number *= 2
    number = max(1, int(number * target_s / max(elapsed, 1e-9)))
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return {
        "median_us": statistics.median(samples),
        "best_us": min(samples),
        "calls_per_batch": number,
    }


def run(repeat: int = 15) -> dict[str, Any]:
    """Run every case; return the results as a JSON-ready dict."""
    ours = compile_json_schema(SCHEMA)
    theirs = jsonschema.Draft202012Validator(SCHEMA)
    frozen = materialize(VALUE)
    assert ours.is_valid(VALUE) and ours.is_valid(frozen) and theirs.is_valid(VALUE)
    assert not ours.is_valid(INVALID) and not theirs.is_valid(INVALID)
    cases: dict[str, Callable[[], object]] = {
        "ours is_valid (plain dict)": lambda: ours.is_valid(VALUE),
        "ours is_valid (frozen)": lambda: ours.is_valid(frozen),
        "ours validate (valid)": lambda: ours.validate(frozen),
        "ours validate (invalid, 5 messages)": lambda: ours.validate(INVALID),
        "ours validate_json_schema_value (raw dict schema)": lambda: validate_json_schema_value(
            SCHEMA, frozen
        ),
        "jsonschema is_valid (compiled)": lambda: theirs.is_valid(VALUE),
        "jsonschema iter_errors (invalid)": lambda: list(theirs.iter_errors(INVALID)),
    }
    results = {name: _per_op_us(fn, repeat=repeat) for name, fn in cases.items()}
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
        },
    }


def _table(report: dict[str, Any]) -> str:
    rows = [("case", "median µs/op", "best µs/op", "x vs jsonschema")]
    for name, entry in report["results"].items():
        rows.append(
            (
                name,
                f"{entry['median_us']:.3f}",
                f"{entry['best_us']:.3f}",
                f"{entry['speedup_vs_jsonschema']:.1f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.ljust(widths[0]) if j == 0 else cell.rjust(widths[j])
                for j, cell in enumerate(row)
            )
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; with ``--json PATH``, also write the report there."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--repeat", type=int, default=15, help="timed batches per case (default 15)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    args = parser.parse_args(argv)
    report = run(repeat=args.repeat)
    print(_table(report))
    headline = report["headline"]
    print(
        f"\nsmall object (5 properties, one nested): ours {headline['ours_us']:.2f} µs, "
        f"jsonschema {headline['jsonschema_us']:.2f} µs, {headline['speedup']:.1f}x faster"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
