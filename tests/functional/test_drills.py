"""The resilience drills, short versions (``python3 -m drills --short``).

Each drill starts its own real daemon, breaks it on purpose and returns a
report of every violated invariant; the long versions (``tox -e drill``)
run the same code with more kills, cases, cycles and rounds. Bugs already
reported (``report.known``) are printed, not failed on: their xfail lives
in ``tests/unit/test_fuzz_protocol.py`` (a privileged test may not skip).
"""
from __future__ import annotations

import importlib

import pytest

pytestmark = pytest.mark.privileged


@pytest.mark.parametrize("name", ["chaos", "fuzz", "probes", "saturation",
                                  "sigterm", "slowloris", "sockettrust",
                                  "tenant", "upgrade"])
def test_drill(name: str) -> None:
    """``upgrade`` exports its earlier release (``drills.upgrade.PREVIOUS``)
    from this clone's git history: a clone without it fails here, loudly."""
    report = importlib.import_module(f"drills.{name}").run(short=True, seed=0)
    print(report.render())
    assert report.ok, report.render()


def test_chaos_counts_every_error_and_retry() -> None:
    """The chaos tally fails on any error answer and counts the shim's
    retries by the reason it logged (both shims' words)."""
    from drills.chaos import Tally
    from drills.common import ShimCall
    tally = Tally()
    tally.record("ADD", ShimCall(0, {}, 0.1, "{}", "kuryr-cni: ADD: kuryr-supervisor "
                                 "at unix:///x is not there (connection refused); "
                                 "retrying for up to 10 s\n"))
    tally.record("DEL", ShimCall(1, {"cniVersion": "1.0.0", "code": 11, "msg": "x"},
                                 0.1, '{"code": 11}', ""))
    assert tally.retried == {"connection refused": 1}
    assert tally.codes["DEL"] == {"code 11": 1}
    assert len(tally.errors) == 1 and not tally.problems


def test_upgrade_needs_its_release(tmp_path: object) -> None:
    """A revision missing from the clone is an error, never HEAD instead."""
    from pathlib import Path

    from drills.common import export_tree
    with pytest.raises(RuntimeError, match="not in"):
        export_tree("0" * 40, Path(str(tmp_path)) / "tree")
