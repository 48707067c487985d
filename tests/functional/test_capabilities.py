"""The capabilities the daemon is given (systemd's CapabilityBoundingSet, the
DaemonSet's securityContext) are exactly what it needs: a real daemon under a
bounding set of NET_ADMIN and SYS_ADMIN serves ADD and DEL into a real network
namespace, and without SYS_ADMIN the ADD fails (setns(2) into the pod's
namespace needs it), so SYS_ADMIN is proven necessary, not cargo."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.functional.cni_harness import Namespaces, install_shim, ip, run_shim, unique

pytestmark = pytest.mark.privileged

# What the unit and the DaemonSet grant; nothing else survives setpriv.
GRANTED = "+net_admin,+sys_admin"


class CappedDaemon(Daemon):
    """The real daemon, exec'd through setpriv with a capability bounding set
    (what systemd's CapabilityBoundingSet and a container runtime's
    capability list do to a root process)."""

    caps = GRANTED

    def start(self) -> CappedDaemon:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["setpriv", f"--bounding-set=-all,{self.caps}",
                 "--inh-caps=-all", sys.executable, "-m",
                 "kuryr_supervisor.daemon", "--config-file", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        return self


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Any]:
    made: list[CappedDaemon] = []

    def make(caps: str) -> CappedDaemon:
        workdir = tmp_path / f"d{len(made)}"
        workdir.mkdir()
        daemon = CappedDaemon(workdir)
        daemon.caps = caps
        made.append(daemon)
        return daemon.start()
    yield make
    for daemon in made:
        daemon.close()


def effective_caps(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("CapEff:"))
    return int(line.split()[1], 16)


def add_and_del(daemon: Daemon, tmp: Path, netns: str) -> tuple[int, Any, int]:
    shim = install_shim(str(tmp))
    netconf = {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
               "daemon_socket": f"unix://{daemon.socket_path}"}
    cid = unique("cap", 24)
    code, result = run_shim(shim, "ADD", netconf, container_id=cid,
                            netns=f"/run/netns/{netns}")
    del_code, _ = run_shim(shim, "DEL", netconf, container_id=cid,
                           netns=f"/run/netns/{netns}")
    return code, result, del_code


def test_net_admin_and_sys_admin_suffice(capped: Any, tmp_path: Path,
                                         namespaces: Namespaces) -> None:
    daemon = capped(GRANTED)
    daemon.wait_ready()
    net_admin, sys_admin = 1 << 12, 1 << 21
    assert effective_caps(daemon.pid) == net_admin | sys_admin
    ns = namespaces.create()
    code, result, del_code = add_and_del(daemon, tmp_path, ns)
    assert code == 0, result
    assert result["ips"][0]["address"]
    assert del_code == 0
    assert "eth0" not in ip("netns", "exec", ns, "ip", "-o", "link").stdout


def test_without_sys_admin_an_add_fails(capped: Any, tmp_path: Path,
                                        namespaces: Namespaces) -> None:
    daemon = capped("+net_admin")
    daemon.wait_ready()            # NET_ADMIN is what readiness checks
    ns = namespaces.create()
    code, result, _ = add_and_del(daemon, tmp_path, ns)
    assert code != 0, result
    # "open netlink in netns: Operation not permitted": the setns(2) itself.
    assert "netns" in result["msg"] and result["details"] == "errno=1", result
    assert "eth0" not in ip("netns", "exec", ns, "ip", "-o", "link").stdout
