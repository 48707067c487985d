"""The suite's precondition, loopback (tests/conftest.py): in a real
network namespace whose loopback is down (what ``unshare -rn`` makes), a
run stops before its first test with one line saying why and how to fix
it; with loopback brought up, as the test guide says, it runs."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNSHARE = shutil.which("unshare")
IP = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
#: Tests of the unit tier that need nothing but the package.
SOME = ["tests/unit/test_cni_sockets.py", "-k", "addresses"]


def _user_namespaces() -> bool:
    if UNSHARE is None:
        return False
    return subprocess.run([UNSHARE, "-rn", "true"], capture_output=True,
                          timeout=30).returncode == 0


pytestmark = pytest.mark.skipif(
    not _user_namespaces(),
    reason="unshare -rn is refused here (no user namespaces)")


def in_new_netns(tmp_path: Path, setup: str = "") -> subprocess.CompletedProcess[str]:
    """This run's Python running pytest on :data:`SOME`, in a new user and
    network namespace (its own TMPDIR: inside, the user is root)."""
    command = " ".join([sys.executable, "-m", "pytest", "-q", "--tier=unit",
                        "-p", "no:cacheprovider", *SOME])
    return subprocess.run(
        [UNSHARE, "-rn", "sh", "-c", f"{setup}{command}"], cwd=ROOT,
        env=dict(os.environ, TMPDIR=str(tmp_path)), capture_output=True,
        text=True, timeout=120)


def test_a_run_without_loopback_stops_before_its_first_test(
        tmp_path: Path) -> None:
    run = in_new_netns(tmp_path)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert run.stdout == ""                     # no test ran
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("ERROR: loopback unusable: a connection to "
                           "127.0.0.1 failed ("), line
    assert "ip link set lo up" in line and "unshare -rn" in line, line


@pytest.mark.skipif(IP is None, reason="no ip (iproute2)")
def test_with_loopback_brought_up_it_runs(tmp_path: Path) -> None:
    run = in_new_netns(tmp_path, f"{IP} link set lo up && ")
    assert run.returncode == 0, run.stdout + run.stderr
    assert " passed" in run.stdout, run.stdout
