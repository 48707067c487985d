"""The DaemonSet's uninstall path: with ``[cni_install] uninstall_on_stop``
a real daemon removes the conflist and the shim it installed when SIGTERM
stops it gracefully; without it (rolling upgrades) they stay."""
from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon, wait_until

pytestmark = pytest.mark.privileged


@pytest.fixture
def installing(tmp_path: Path) -> Iterator[Any]:
    made: list[Daemon] = []

    def make(uninstall: bool) -> tuple[Daemon, Path, Path]:
        workdir = tmp_path / f"d{len(made)}"
        workdir.mkdir()
        bin_dir, conf_dir = workdir / "opt-cni-bin", workdir / "etc-cni-net.d"
        daemon = Daemon(workdir, {"cni_install": {
            "enabled": True, "bin_dir": bin_dir, "conf_dir": conf_dir,
            "uninstall_on_stop": uninstall}})
        made.append(daemon)
        return daemon.start(), bin_dir / "kuryr-cni", conf_dir / "10-kuryr.conflist"
    yield make
    for daemon in made:
        daemon.close()


@pytest.mark.parametrize("uninstall", [True, False])
def test_graceful_stop(installing: Any, uninstall: bool) -> None:
    daemon, shim, conflist = installing(uninstall)
    daemon.wait_ready()
    wait_until(lambda: shim.exists() and conflist.exists(), 10)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(30) == 0
    assert shim.exists() is not uninstall
    assert conflist.exists() is not uninstall


def test_a_crash_leaves_the_host_alone(installing: Any) -> None:
    """Only a graceful stop uninstalls: a daemon killed for its health comes
    back and must find the node's CNI in place."""
    daemon, shim, conflist = installing(True)
    daemon.wait_ready()
    wait_until(lambda: shim.exists() and conflist.exists(), 10)
    daemon.signal(signal.SIGKILL)                      # not graceful
    assert daemon.wait_exit(30) != 0
    assert shim.exists() and conflist.exists()
