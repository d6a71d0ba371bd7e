"""Lossless JSON on the hot path: materialize, thaw, dumps, loads.

Times each operation on a typical tool-argument payload (a flat 10-key dict,
and a 5-property object with nested parts) and, in the same run, the plain
baselines it is built on (``dict()`` copy, ``copy.deepcopy``, raw orjson).
Prints median and best µs per op over repetitions, after a warm-up.

    ./dev python -m benchmarks.bench_json [--repeat N] [--json PATH]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from dsh_actors.json import dumps, is_lossless, loads, materialize, thaw

FLAT: dict[str, Any] = {
    "path": "/src/app/main.py",
    "line": 120,
    "count": 3,
    "recursive": True,
    "pattern": "def .*\\(",
    "limit": 100,
    "ratio": 0.25,
    "mode": "fast",
    "encoding": "utf-8",
    "extra": None,
}
NESTED: dict[str, Any] = {
    "query": "actor runtime",
    "options": {"depth": 2, "follow": "links", "kinds": ["file", "dir"]},
    "files": ["a.py", "b.py", "c.py"],
    "filter": {"tag": "x", "exclude": [{"glob": "*.pyc"}]},
    "limit": 50,
}
BIG_TEXT = "x" * 10_000_000


def _per_op_us(
    fn: Callable[[], object], *, repeat: int, target_ns: int = 20_000_000
) -> dict[str, float]:
    """Median and best µs per call of ``fn`` over ``repeat`` timed batches,
    each sized to run about ``target_ns``, after a warm-up that calibrates."""
    number = 1
    while True:  # warm-up and calibration
        start = time.perf_counter_ns()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter_ns() - start
        if elapsed >= target_ns // 4:
            break
        number *= 2
    number = max(1, number * target_ns // max(elapsed, 1))
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter_ns() - start) / number / 1000)
    return {"median_us": statistics.median(samples), "best_us": min(samples), "calls": number}


def run(repeat: int = 15) -> dict[str, Any]:
    """Run every case; return the results as a JSON-ready dict."""
    frozen = materialize(NESTED)
    text = dumps(NESTED)
    big = {"content": BIG_TEXT}
    assert thaw(frozen) == NESTED and loads(text) == frozen
    # (name, operation, baseline name or None)
    cases: list[tuple[str, Callable[[], object], str | None]] = [
        ("baseline: dict(flat)", lambda: dict(FLAT), None),
        ("baseline: copy.deepcopy(nested)", lambda: copy.deepcopy(NESTED), None),
        ("baseline: orjson.dumps(nested)", lambda: orjson.dumps(NESTED), None),
        ("baseline: orjson.loads(nested)", lambda: orjson.loads(text), None),
        ("materialize flat 10-key dict", lambda: materialize(FLAT), "baseline: dict(flat)"),
        (
            "materialize nested 5-property object",
            lambda: materialize(NESTED),
            "baseline: copy.deepcopy(nested)",
        ),
        ("materialize already frozen (nested)", lambda: materialize(frozen), None),
        ("is_lossless nested", lambda: is_lossless(NESTED), None),
        ("thaw frozen nested", lambda: thaw(frozen), "baseline: copy.deepcopy(nested)"),
        ("dumps frozen nested", lambda: dumps(frozen), "baseline: orjson.dumps(nested)"),
        ("dumps plain nested", lambda: dumps(NESTED), "baseline: orjson.dumps(nested)"),
        ("loads nested (frozen)", lambda: loads(text), "baseline: orjson.loads(nested)"),
        (
            "loads nested (frozen=False)",
            lambda: loads(text, frozen=False),
            "baseline: orjson.loads(nested)",
        ),
        ("materialize {content: 10 MB str}", lambda: materialize(big), None),
    ]
    results: dict[str, dict[str, Any]] = {}
    for name, fn, baseline in cases:
        entry: dict[str, Any] = _per_op_us(fn, repeat=repeat)
        if baseline is not None:
            entry["baseline"] = baseline
            entry["x_baseline"] = entry["median_us"] / results[baseline]["median_us"]
        results[name] = entry
    return {
        "benchmark": "json",
        "python": platform.python_version(),
        "orjson": orjson.__version__,
        "repeat": repeat,
        "results": results,
    }


def _table(report: dict[str, Any]) -> str:
    rows = [("case", "median µs/op", "best µs/op", "x baseline")]
    for name, entry in report["results"].items():
        ratio = entry.get("x_baseline")
        rows.append(
            (
                name,
                f"{entry['median_us']:.3f}",
                f"{entry['best_us']:.3f}",
                "" if ratio is None else f"{ratio:.1f}",
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
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
