"""How a test realises a pod's volume (tests/fixtures/podspec.py): a
volume mounted over a directory that holds this run's interpreter or
checkout (the controller's ``emptyDir`` on /tmp, a checkout under /tmp)
shows the volume, yet keeps them visible at their own paths; the mount
points it made in the volume are gone once the process is."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.fixtures.podspec import MountPoints, mounted

pytestmark = pytest.mark.privileged


def run_over(tmp_path: Path, keep: list[Path]) -> subprocess.CompletedProcess[str]:
    """``host`` (a checkout with its venv, and a file beside them) with an
    empty volume mounted over it, as ``keep`` says; what a process inside
    sees there."""
    host = tmp_path / "host"
    (host / "checkout" / ".tox" / "py3").mkdir(parents=True)
    (host / "checkout" / ".tox" / "py3" / "python").write_text("kept\n")
    (host / "beside").write_text("hidden\n")
    volume = tmp_path / "volume"
    volume.mkdir()
    points = MountPoints()
    try:
        return subprocess.run(
            mounted([(volume, host, False)],
                    ["sh", "-c", f"ls -A {host}; cat "
                     f"{host}/checkout/.tox/py3/python"],
                    points=points, keep=keep),
            capture_output=True, text=True, timeout=30)
    finally:
        points.close()
        assert sorted(p.name for p in volume.iterdir()) == []


def test_a_volume_over_the_checkout_keeps_it_visible(tmp_path: Path) -> None:
    host = tmp_path / "host"
    seen = run_over(tmp_path, [host / "checkout" / ".tox" / "py3",
                               host / "checkout", Path("/usr")])
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout == "checkout\nkept\n"       # not "beside": the volume


def test_without_it_the_volume_hides_the_checkout(tmp_path: Path) -> None:
    seen = run_over(tmp_path, [])
    assert seen.returncode != 0 and seen.stdout == ""
    assert "No such file" in seen.stderr
