"""The benchmark harness's statistics and report code, on fixed inputs.

The benchmarks themselves run under ``tox -e bench`` (root, real netns,
minutes); what is checked here is that the numbers they print are computed
and laid out correctly. No timing is measured or asserted.
"""
from __future__ import annotations

import json
import statistics

import pytest

from benchmarks.context import Outcome
from benchmarks.harness import _missing
from benchmarks.run import report
from benchmarks.stats import Figure, format_machine, format_table, percentile, ratio, summarize


def test_percentile_interpolates_between_closest_ranks() -> None:
    samples = [4.0, 1.0, 3.0, 2.0]          # order must not matter
    assert percentile(samples, 0) == 1.0
    assert percentile(samples, 100) == 4.0
    assert percentile(samples, 50) == 2.5
    assert percentile(samples, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0


@pytest.mark.parametrize("n", [1, 2, 5, 30, 101])
def test_p50_is_the_median(n: int) -> None:
    samples = [float((i * 37) % 11) for i in range(n)]
    assert percentile(samples, 50) == pytest.approx(statistics.median(samples))


def test_percentile_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize() -> None:
    s = summarize([float(i) for i in range(1, 101)])
    assert s["n"] == 100 and s["min"] == 1.0 and s["max"] == 100.0
    assert s["median"] == 50.5
    assert s["p90"] == pytest.approx(90.1)
    assert s["p99"] == pytest.approx(99.01)


def test_ratio_and_goals() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(1.0, 0.0) is None
    faster = Figure("b", "add", 20.0, "ms", 15.0, "ref", goal=2.0, goal_on="ratio")
    assert faster.ratio == pytest.approx(4 / 3) and faster.met is True
    slower = Figure("b", "add", 40.0, "ms", 15.0, "ref", goal=2.0, goal_on="ratio")
    assert slower.met is False
    budget = Figure("b", "p99", 2.5, "ms", 2.0, "budget", goal=2.0)
    assert budget.met is False and budget.goal_text() == "<= 2 ms"
    assert Figure("b", "rps", 900.0, "req/s").met is None
    as_dict = faster.as_dict()
    assert as_dict["met"] is True and as_dict["goal_text"] == "<= 2x"
    json.dumps(as_dict)


def test_table_lines_up_and_marks_misses() -> None:
    figures = [Figure("cni-latency", "ADD median", 30.0, "ms", 15.0, "bridge+host-local",
                      goal=2.0, goal_on="ratio"),
               Figure("memory", "idle PSS", 80.0, "MiB", 75.0, "budget", goal=75.0),
               Figure("probes", "throughput", 1234.5, "req/s")]
    lines = format_table(figures).splitlines()
    assert len(lines) == 2 + len(figures)
    assert lines[0].split() == ["bench", "figure", "value", "unit", "reference", "ratio",
                                "goal", "met"]
    assert "2.00x" in lines[2] and lines[2].endswith("yes")
    assert "1.07x" in lines[3] and lines[3].endswith("NO")
    assert lines[4].split()[-2:] == ["1234", "req/s"]
    unit = lines[0].index("unit")
    assert lines[2][unit:unit + 3] == "ms " and lines[3][unit:unit + 3] == "MiB"


def test_machine_and_report() -> None:
    info = {"cores": 2, "machine": "x86_64", "kernel": "6.1", "implementation": "CPython",
            "python": "3.11.7", "loadavg_before": [1.0, 0.5, 0.25],
            "loadavg_after": [2.0, 1.0, 0.5]}
    assert "before 1.00 0.50 0.25, after 2.00 1.00 0.50" in format_machine(info)
    outcome = Outcome([Figure("startup", "ready", 0.6, "s", 1.0, "budget", goal=1.0)],
                      notes=["a note"])
    text = report(info, {"startup": {"figures": outcome.figures, "notes": outcome.notes},
                         "burst": {"error": "Traceback\nRuntimeError: boom\n"}})
    assert "- a note" in text and "burst FAILED: RuntimeError: boom" in text
    assert "goals met: 1/1" in text


def test_probe_answer_is_complete_at_content_length() -> None:
    assert _missing(b"HTTP/1.1 200 OK\r\nContent-") == -1
    assert _missing(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok") == 1
    assert _missing(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n") == 0
    assert _missing(b"HTTP/1.1 200 OK\r\n\r\nbody") == -1


def test_fleet_peak_counts_the_busiest_window() -> None:
    from benchmarks.fleet import Before, peak
    times = [0.0, 0.05, 0.09, 0.5, 1.2, 1.21, 1.25, 1.29]
    assert peak(times, 0.1) == 4            # 1.2 .. 1.29
    assert peak(times, 1.0) == 5            # 0.5 .. 1.29
    assert peak([], 1.0) == 0
    # "before" reproduces the old fixed schedule: full delay, immediate relist
    assert Before().uniform(2.0, 4.0) == 4.0 and Before().uniform(0.0, 0.5) == 0.0


def test_a_python_without_the_dependencies_gets_one_line() -> None:
    """``python3 -m benchmarks`` with a bare interpreter (no site-packages,
    as Debian's python3 without the daemon installed): a message naming
    the missing module and what to run, exit 2, no traceback."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-S", "-m", "benchmarks"],
                          cwd=root, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "lacks the module" in done.stderr and "tox -e bench" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
