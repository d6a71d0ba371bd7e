"""The session log: memory held per event, and the cost of one append.

An in-memory :class:`~dsh_actors.Session` keeps every event's JSON line,
so what it holds per event bounds how long a process can log. The memory
rows append ``--events`` ``tool/call`` and ``tool/result`` pairs (distinct
call ids, a small text result) to a fresh in-memory session and report the
bytes ``tracemalloc`` sees held per event (the lines, the list slots, and
the call ids tracked until their results arrive), beside the baseline: the
JSON bytes per event the file would hold (newline included). The timing
rows give µs per append, in memory and to a file, against ``orjson.dumps``
of the same event.

    ./dev python -m benchmarks.bench_session [--repeat N] [--events N] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import tempfile
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from benchmarks._util import Case, add_baseline_ratios, bench_main, case_table, per_op_us
from dsh_actors.model import TextBlock, ToolExecutionSuccess
from dsh_actors.session import Session, call_event, result_event

RESULT = ToolExecutionSuccess(value="hello there", content=(TextBlock("hello there"),))


def _events(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n // 2):
        call_id = f"call_{i:08d}"
        out.append(call_event(1, 1, call_id, "echo", {"message": "hello there"}))
        out.append(result_event(call_id, RESULT))
    return out


def memory(events: int) -> dict[str, Any]:
    """Bytes held per event by an in-memory session, and JSON bytes per event."""
    batch = _events(events)
    json_bytes = sum(len(orjson.dumps(e)) + 1 for e in batch) / len(batch)
    gc.collect()
    tracemalloc.start()
    try:
        session = Session()
        before = tracemalloc.get_traced_memory()[0]
        for event in batch:
            session.append(event)
        gc.collect()
        held = (tracemalloc.get_traced_memory()[0] - before) / len(batch)
    finally:
        tracemalloc.stop()
    del session
    return {
        "events": len(batch),
        "json_bytes_per_event": json_bytes,
        "bytes_per_event": held,
        "x_json": held / json_bytes,
    }


def run(repeat: int = 15, events: int = 20_000) -> dict[str, Any]:
    """Measure memory, then time the appends; a JSON-ready dict."""
    held = memory(events)
    event = call_event(1, 1, "call_00000001", "echo", {"message": "hello there"})
    cases: list[Case] = [("baseline: orjson.dumps(tool/call)", lambda: orjson.dumps(event), None)]
    with tempfile.TemporaryDirectory() as folder:
        in_memory = Session()
        on_disk = Session(Path(folder) / "log.jsonl")
        try:
            cases.append(("append tool/call (in memory)", lambda: in_memory.append(event), cases[0][0]))
            cases.append(("append tool/call (file, no fsync)", lambda: on_disk.append(event), cases[0][0]))
            # Each timed batch appends thousands of events: the in-memory
            # session is emptied after its case, so memory stays flat.
            results: dict[str, dict[str, Any]] = {}
            for name, fn, baseline in cases:
                entry = per_op_us(fn, repeat=repeat)
                if baseline is not None:
                    entry["baseline"] = baseline
                results[name] = entry
                in_memory._lines.clear()
            add_baseline_ratios(results)
        finally:
            on_disk.close()
    return {
        "benchmark": "session",
        "python": platform.python_version(),
        "orjson": orjson.__version__,
        "repeat": repeat,
        "memory": held,
        "results": results,
    }


def table(report: dict[str, Any]) -> str:
    mem = report["memory"]
    lines = [
        f"memory, {mem['events']} events (tool/call + tool/result pairs) in an in-memory Session:",
        f"  bytes held per event   {mem['bytes_per_event']:8.0f}",
        f"  JSON bytes per event   {mem['json_bytes_per_event']:8.0f}   (baseline: the file's line)",
        f"  x JSON                 {mem['x_json']:8.1f}",
        "",
    ]
    return "\n".join(lines) + case_table(report["results"])


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--events", type=int, default=20_000, help="events appended for the memory rows (default 20000)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; with ``--json PATH``, also write the report there."""
    return bench_main(argv, doc=__doc__, run=run, table=table, add_arguments=_arguments)


if __name__ == "__main__":
    sys.exit(main())
