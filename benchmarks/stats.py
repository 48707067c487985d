"""Statistics, figures and the report of the kuryr-supervisor benchmarks.

Pure functions on numbers and small records, so the report code is tested
without timing anything (``tests/unit/test_benchmarks.py``). Invariants:

- a percentile is the linear interpolation between closest ranks (NumPy's
  default method), so p50 equals ``statistics.median`` and a figure can be
  recomputed by hand from the raw samples kept in the JSON;
- every figure is measured in the same run as its reference, and the ratio
  is always ``value / reference``; a figure whose reference is a budget
  (probes, recovery, memory, start-up) says so in ``reference_label``;
- "met" is decided from the figure and its goal only, never adjusted.
"""
from __future__ import annotations

import dataclasses
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any


def percentile(samples: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) of ``samples``, linearly interpolated."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile out of range: {pct}")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * pct / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, p90, p99, min, max and count: what every latency figure quotes."""
    return {"n": len(samples), "median": statistics.median(samples),
            "p90": percentile(samples, 90), "p99": percentile(samples, 99),
            "min": min(samples), "max": max(samples)}


def ratio(value: float, reference: float) -> float | None:
    """``value / reference``, or None when the reference is zero or missing."""
    if not reference or math.isnan(reference):
        return None
    return value / reference


@dataclasses.dataclass
class Figure:
    """One reported number, beside what it is compared with.

    ``goal`` is an upper bound on ``ratio`` when ``goal_on == "ratio"`` and an
    upper bound on ``value`` when ``goal_on == "value"``; None means the figure
    is informative only.
    """

    bench: str
    name: str
    value: float
    unit: str
    reference: float | None = None
    reference_label: str = ""
    goal: float | None = None
    goal_on: str = "value"
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return None if self.reference is None else ratio(self.value, self.reference)

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        subject = self.ratio if self.goal_on == "ratio" else self.value
        return None if subject is None else subject <= self.goal

    def goal_text(self) -> str:
        if self.goal is None:
            return ""
        if self.goal_on == "ratio":
            return f"<= {self.goal:g}x"
        return f"<= {self.goal:g} {self.unit}"

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(ratio=self.ratio, met=self.met, goal_text=self.goal_text())
        return out


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0 or abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def format_table(figures: Iterable[Figure]) -> str:
    """A fixed-width table: one line per figure, grouped by benchmark."""
    head = ("bench", "figure", "value", "unit", "reference", "ratio", "goal", "met")
    rows = []
    for f in figures:
        ref = "" if f.reference is None else f"{_num(f.reference)} ({f.reference_label})"
        met = {None: "", True: "yes", False: "NO"}[f.met]
        rows.append((f.bench, f.name, _num(f.value), f.unit, ref,
                     "" if f.ratio is None else f"{f.ratio:.2f}x", f.goal_text(), met))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return "\n".join(lines)


def machine(load_before: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """What the figures depend on: cores, load, interpreter, kernel."""
    return {"cores": os.cpu_count(), "python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "kernel": platform.release(), "machine": platform.machine(),
            "loadavg_before": list(load_before or os.getloadavg()),
            "loadavg_after": None, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def format_machine(info: dict[str, Any]) -> str:
    def load(v: Sequence[float] | None) -> str:
        return "-" if v is None else " ".join(f"{x:.2f}" for x in v)
    return (f"machine: {info['cores']} cores, {info['machine']}, kernel {info['kernel']}, "
            f"{info['implementation']} {info['python']}\n"
            f"load average (1/5/15 min): before {load(info['loadavg_before'])}, "
            f"after {load(info['loadavg_after'])}")
