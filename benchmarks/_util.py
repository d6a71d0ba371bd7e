"""Shared helpers for the benchmark suite: a progress bar on stderr, timing
(medians over repetitions after warm-up), the machine's description, the
table on stdout, the targets, and the pieces the micro-benchmarks
(``bench_json``, ``bench_registry``, ``bench_schema``, ``bench_ptc``) share:
timed cases, their ratios to a baseline, their table, and their command line.

Nothing here asserts: a benchmark reports what it measured, and a missed
target is a ✗ in the table, never an exception.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = [
    "Case",
    "Progress",
    "Row",
    "Target",
    "add_baseline_ratios",
    "bench_main",
    "case_table",
    "machine",
    "median",
    "per_op_us",
    "render_table",
    "sleep_overshoot_ms",
    "summary_us",
    "ThreadPeak",
    "time_cases",
    "timed",
]


# --------------------------------------------------------------------------
# Progress bar
# --------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr: ``[#####.....] 12/40  pool mixed``.

    On a terminal it redraws in place; otherwise (a pipe, CI) it prints one
    line per section so the log stays readable. ``total`` is an estimate:
    the bar never goes past 100%.
    """

    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 28) -> None:
        self.total = max(1, total)
        self.done = 0
        self.width = width
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.perf_counter()
        self._label = ""
        self._last_section = ""

    def advance(self, label: str, steps: int = 1) -> None:
        self.done += steps
        self._label = label
        self._draw()

    def note(self, label: str) -> None:
        """Show ``label`` without advancing (a long step is starting)."""
        self._label = label
        self._draw()

    def _draw(self) -> None:
        frac = min(1.0, self.done / self.total)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.started
        line = f"[{bar}] {int(frac * 100):3d}% {elapsed:5.1f}s  {self._label}"
        if self.tty:
            self.stream.write("\r" + line[:110].ljust(110))
        else:
            section = self._label.split(":")[0]
            if section == self._last_section:
                return
            self._last_section = section
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        elapsed = time.perf_counter() - self.started
        if self.tty:
            self.stream.write("\r" + " " * 110 + "\r")
        self.stream.write(f"benchmarks done in {elapsed:.1f}s\n")
        self.stream.flush()


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def median(samples: Iterable[float]) -> float:
    values = list(samples)
    return float(statistics.median(values)) if values else float("nan")


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` took (``perf_counter``)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def sleep_overshoot_ms(samples: int = 20, seconds: float = 0.010) -> float:
    """The median amount by which ``time.sleep(seconds)`` oversleeps here, in
    ms: the pool workloads add it to every call of their ideal makespan."""
    time.sleep(seconds)  # warm-up
    extra = []
    for _ in range(samples):
        start = time.perf_counter()
        time.sleep(seconds)
        extra.append((time.perf_counter() - start - seconds) * 1000)
    return max(0.0, median(extra))


def callgrind_instructions(module: str, args: Sequence[str]) -> int:
    """Instructions (every thread) of a whole process running
    ``python -m module *args`` under valgrind's callgrind, with
    ``PYTHONHASHSEED=0`` so runs repeat."""
    import re
    import subprocess

    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m", module, *args],
        env=dict(os.environ, PYTHONHASHSEED="0"),
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {out.stderr[-500:]}")
    return int(found.group(1))


def summary_us(samples: Sequence[float]) -> dict[str, Any]:
    """``median_us`` and ``best_us`` of ``samples`` (already in µs)."""
    return {"median_us": median(samples), "best_us": min(samples)}


def per_op_us(
    fn: Callable[[], object],
    *,
    repeat: int,
    target_ns: int = 20_000_000,
    calls_key: str = "calls",
) -> dict[str, Any]:
    """Median and best µs per call of ``fn`` over ``repeat`` timed batches,
    each sized to run about ``target_ns``, after a warm-up that calibrates;
    the batch size is reported under ``calls_key``."""
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
    return summary_us(samples) | {calls_key: number}


Case = tuple[str, Callable[[], object], str | None]
"""``(name, operation, name of its baseline case or None)``."""


def add_baseline_ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Give every entry that names a ``baseline`` its ``x_baseline``: its
    median over the baseline's. Returns ``results`` (changed in place)."""
    for entry in results.values():
        baseline = entry.get("baseline")
        if baseline is not None:
            entry["x_baseline"] = entry["median_us"] / results[baseline]["median_us"]
    return results


def time_cases(cases: Iterable[Case], *, repeat: int, calls_key: str = "calls") -> dict[str, dict[str, Any]]:
    """:func:`per_op_us` of every case, in order, with its baseline ratio."""
    results: dict[str, dict[str, Any]] = {}
    for name, fn, baseline in cases:
        entry = per_op_us(fn, repeat=repeat, calls_key=calls_key)
        if baseline is not None:
            entry["baseline"] = baseline
        results[name] = entry
    return add_baseline_ratios(results)


class ThreadPeak:
    """The largest ``threading.active_count()`` seen by :meth:`sample`
    (called from inside tool bodies; cheap and thread-safe enough: a max of
    ints, a lost update only loses one sample)."""

    def __init__(self) -> None:
        self.peak = threading.active_count()

    def sample(self) -> None:
        count = threading.active_count()
        if count > self.peak:
            self.peak = count


# --------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """CPU count, load average, Python and pykka versions."""
    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover - not on every platform
        load = (float("nan"),) * 3
    try:
        from importlib.metadata import version

        pykka_version = version("pykka")
    except Exception:  # noqa: BLE001
        pykka_version = "?"
    affinity = None
    if hasattr(os, "sched_getaffinity"):
        affinity = len(os.sched_getaffinity(0))
    return {
        "cpu_count": float(os.cpu_count() or 0),
        "cpu_usable": float(affinity if affinity is not None else (os.cpu_count() or 0)),
        "load_1m": float(load[0]),
        "load_5m": float(load[1]),
        "load_15m": float(load[2]),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "pykka": pykka_version,
        "platform": platform.platform(),
        "switch_interval_s": sys.getswitchinterval(),
    }


# --------------------------------------------------------------------------
# Targets and the table
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """``value <= limit`` (both already in the same unit); reported only."""

    text: str
    value: float
    limit: float

    @property
    def met(self) -> bool:
        return self.value == self.value and self.value <= self.limit  # NaN never meets

    @property
    def mark(self) -> str:
        return "✓" if self.met else "✗"


@dataclass
class Row:
    """One line of the table: what, dsh-actors' figure, the baselines',
    the ratio to the main baseline, and the target (if any)."""

    section: str
    case: str
    dsh: str
    baseline: str = ""
    ratio: str = ""
    target: Target | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def render_table(rows: Sequence[Row], header_lines: Sequence[str] = ()) -> str:
    heads = ("section", "case", "dsh-actors", "baseline(s)", "ratio", "target", "")
    cells = [heads]
    for row in rows:
        target = "" if row.target is None else row.target.text
        mark = "" if row.target is None else row.target.mark
        if row.note:
            mark = (mark + " " + row.note).strip()
        cells.append((row.section, row.case, row.dsh, row.baseline, row.ratio, target, mark))
    return _grid(cells, header_lines, left=(0, 1, 5, 6), strip=True)


def _grid(
    cells: Sequence[Sequence[str]],
    header_lines: Sequence[str],
    *,
    left: Sequence[int],
    strip: bool,
) -> str:
    """``header_lines``, then ``cells`` as aligned columns (the ``left`` ones
    left-aligned, the others right-aligned) with a dashed rule under the
    first row; ``strip`` drops trailing blanks."""
    widths = [max(_width(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = list(header_lines)
    for n, c in enumerate(cells):
        parts = []
        for i, cell in enumerate(c):
            pad = widths[i] - _width(cell)
            parts.append(cell + " " * pad if i in left else " " * pad + cell)
        line = "  ".join(parts)
        lines.append(line.rstrip() if strip else line)
        if n == 0:
            rule = "  ".join("-" * w for w in widths)
            lines.append(rule.rstrip() if strip else rule)
    return "\n".join(lines)


def _width(text: str) -> int:
    return len(text)


def case_table(
    results: dict[str, dict[str, Any]],
    *,
    unit: str = "µs/op",
    digits: int = 3,
    ratio_head: str = "x baseline",
    ratio_key: str = "x_baseline",
    header_lines: Sequence[str] = (),
) -> str:
    """The micro-benchmarks' table: case, median, best (``digits`` decimals,
    in ``unit``) and the ratio under ``ratio_key`` (blank where absent)."""
    cells = [("case", f"median {unit}", f"best {unit}", ratio_head)]
    for name, entry in results.items():
        value = entry.get(ratio_key)
        cells.append(
            (
                name,
                f"{entry['median_us']:.{digits}f}",
                f"{entry['best_us']:.{digits}f}",
                "" if value is None else f"{value:.1f}",
            )
        )
    return _grid(cells, header_lines, left=(0,), strip=False)


def bench_main(
    argv: Sequence[str] | None,
    *,
    doc: str | None,
    run: Callable[..., dict[str, Any]],
    table: Callable[[dict[str, Any]], str],
    repeat: int = 15,
    repeat_help: str = "timed batches per case",
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    """A micro-benchmark's command line: ``--repeat N`` (and what
    ``add_arguments`` adds, each passed to ``run`` by name), then
    ``--json PATH``; prints ``table(report)`` and, with ``--json``, also
    writes the report there."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--repeat", type=int, default=repeat, help=f"{repeat_help} (default {repeat})")
    if add_arguments is not None:
        add_arguments(parser)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    options = vars(parser.parse_args(argv))
    path = options.pop("json")
    report = run(**options)
    print(table(report))
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
            fh.write("\n")
    return 0


def fmt_us(value: float) -> str:
    if value != value:
        return "n/a"
    if value >= 10_000:
        return f"{value / 1000:.1f} ms"
    if value >= 100:
        return f"{value:.0f} µs"
    return f"{value:.1f} µs"


def fmt_ms(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f} ms"


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")
