"""Shared helpers for the benchmark suite: a progress bar on stderr, timing
(medians over repetitions after warm-up), the machine's description, the
table on stdout, and the targets.

Nothing here asserts: a benchmark reports what it measured, and a missed
target is a ✗ in the table, never an exception.
"""

from __future__ import annotations

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
    "Progress",
    "Row",
    "Target",
    "machine",
    "median",
    "render_table",
    "sleep_overshoot_ms",
    "ThreadPeak",
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
    widths = [max(_width(c[i]) for c in cells) for i in range(len(heads))]
    lines = list(header_lines)
    for n, c in enumerate(cells):
        parts = []
        for i, cell in enumerate(c):
            pad = widths[i] - _width(cell)
            parts.append(cell + " " * pad if i in (0, 1, 5, 6) else " " * pad + cell)
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths).rstrip())
    return "\n".join(lines)


def _width(text: str) -> int:
    return len(text)


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
