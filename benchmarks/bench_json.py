"""Lossless JSON on the hot path: materialize, thaw, dumps, loads.

Times each operation on a typical tool-argument payload (a flat 10-key dict,
and a 5-property object with nested parts) and, in the same run, the plain
baselines it is built on (``dict()`` copy, ``copy.deepcopy``, raw orjson).
Prints median and best µs per op over repetitions, after a warm-up.

    ./dev python -m benchmarks.bench_json [--repeat N] [--json PATH]
"""

from __future__ import annotations

import copy
import platform
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from benchmarks._util import Case, bench_main, case_table, time_cases
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


def run(repeat: int = 15) -> dict[str, Any]:
    """Run every case; return the results as a JSON-ready dict."""
    frozen = materialize(NESTED)
    text = dumps(NESTED)
    big = {"content": BIG_TEXT}
    assert thaw(frozen) == NESTED and loads(text) == frozen
    cases: list[Case] = [
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
    return {
        "benchmark": "json",
        "python": platform.python_version(),
        "orjson": orjson.__version__,
        "repeat": repeat,
        "results": time_cases(cases, repeat=repeat),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; with ``--json PATH``, also write the report there."""
    return bench_main(argv, doc=__doc__, run=run, table=lambda report: case_table(report["results"]))


if __name__ == "__main__":
    sys.exit(main())
