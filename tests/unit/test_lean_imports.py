"""An idle CNI daemon imports neither pyroute2 nor keystoneauth1: each is
several MiB of heap in every process (README: CPU priority and memory);
nor any of the controller's modules (its handlers, its OpenStack adapter):
the CNI role's object assembles only the node's workers. Checked in a
fresh interpreter doing what the master does before it forks (its
preflight's warnings included, the role's workers and hooks assembled),
and what the idle workers do (the bridge check, the liveness probe)."""
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
from kuryr_supervisor.master import roles
from kuryr_supervisor.master.listeners import Listeners
from kuryr_supervisor.master.manager import Manager
role = roles.named(conf.role)
role.workers(conf, Listeners(probe=None))
role.hooks(conf)
from kuryr_supervisor.cni import netlink
from kuryr_supervisor.cni.binding import BridgeBinding
BridgeBinding("ksvlean0").verify()
netlink.probe()
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"pyroute2", "keystoneauth1", "requests", "urllib3", "kubernetes"})
heavy += sorted({".".join(m.split(".")[:2]) for m in sys.modules
                 if m.startswith(("kuryr_supervisor.controller",
                                  "kuryr_supervisor.master.roles.controller",
                                  "kuryr_supervisor.master.roles.dependencies"))})
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


def test_the_controller_role_loads_its_own(tmp_path: Path) -> None:
    # The same script sees the controller's modules where they are loaded.
    assert "kuryr_supervisor.controller" in run(
        tmp_path, "[DEFAULT]\nrole = controller\n"
        "[kubernetes]\napi_root = http://127.0.0.1:9\n"
        "[controller]\npod_network_id = net\n").split(",")
