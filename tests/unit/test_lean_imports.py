"""An idle CNI daemon imports neither pyroute2 nor keystoneauth1: each is
several MiB of heap in every process (README: CPU priority and memory).
Checked in a fresh interpreter doing what the master does before it forks
(its preflight's warnings included), and what the idle workers do (the
bridge check, the liveness probe)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from oslo_log import log
from kuryr_supervisor import conf as conf_mod
conf = conf_mod.CONF
log.register_options(conf)
conf_mod.register_opts(conf)
conf_mod.load(conf, ["--config-file", sys.argv[1]])
conf_mod.secret_file_warnings(conf)
conf_mod.unknown_names(conf)
from kuryr_supervisor.cni.install import InstallOnFirstReady
from kuryr_supervisor.master.manager import Manager
from kuryr_supervisor.cni import netlink
from kuryr_supervisor.cni.binding import BridgeBinding
BridgeBinding("ksvlean0").verify()
netlink.probe()
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"pyroute2", "keystoneauth1", "requests", "urllib3", "kubernetes"})
print(",".join(heavy) or "none")
"""


def run(tmp_path: Path, text: str) -> str:
    path = tmp_path / "k.conf"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path)],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_cni_role_stays_lean(tmp_path: Path) -> None:
    assert run(tmp_path, "[DEFAULT]\n") == "none"


def test_openstack_checks_load_keystoneauth(tmp_path: Path) -> None:
    # The same script can see the heavy import: the check can fail.
    assert "keystoneauth1" in run(
        tmp_path, "[controller]\nopenstack_checks = true\n").split(",")
