"""The private Open vSwitch fixture (``tests/fixtures/ovs``) leaves
nothing behind, in the host's namespace and inside a namespace of its own:
its daemons gone, its directory removed, its tap devices deleted."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time

import pytest

from tests.fixtures.ovs import PrivateOVS
from tests.functional.cni_harness import Namespaces, ip_json

pytestmark = pytest.mark.privileged


@pytest.mark.parametrize("in_netns", [False, True])
def test_private_ovs_starts_and_leaves_nothing(namespaces: Namespaces,
                                               in_netns: bool) -> None:
    ns = namespaces.create() if in_netns else None
    where = ("-n", ns) if ns else ()
    bridge = "ksvf" + secrets.token_hex(4)
    ovs = PrivateOVS(netns=ns).start()
    try:
        ovs.add_bridge(bridge)
        assert ovs.vsctl("get", "Bridge", bridge, "datapath_type") == "netdev"
        assert ovs.vsctl("list-ports", bridge) == ""
        [tap] = ip_json(*where, "link", "show", bridge)   # its internal port
        assert tap["ifname"] == bridge
        if ns:
            assert not ip_json("link", "show", bridge)     # not in the host's
        pids = [p.pid for p in (ovs.ovsdb, ovs.vswitchd) if p is not None]
        assert len(pids) == 2
    finally:
        ovs.close()
    assert not os.path.exists(ovs.dir)
    assert not ip_json(*where, "link", "show", bridge)
    assert not ip_json(*where, "link", "show", "ovs-netdev") or not ns
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_a_crashed_vswitchd_is_started_again_a_stopped_one_not(
        namespaces: Namespaces) -> None:
    """``respawn``: ovs-vswitchd dead of SIGABRT (a crash, as Debian 12's
    userspace conntrack assertion) is started again and keeps its bridge;
    one killed by SIGKILL (a stop) is not, nor one :meth:`close` stops."""
    ns = namespaces.create()
    bridge = "ksvf" + secrets.token_hex(4)
    ovs = PrivateOVS(netns=ns, respawn=True).start()
    try:
        ovs.add_bridge(bridge)
        first = ovs.vswitchd
        assert first is not None
        first.send_signal(signal.SIGABRT)
        first.wait(10)
        deadline = time.monotonic() + 20
        while ovs.vswitchd is first or "Bridge" not in _appctl(ovs):
            assert time.monotonic() < deadline, "not started again"
            time.sleep(0.1)
        assert "signal 6" in open(os.path.join(ovs.dir, "respawned.log")
                                  ).read()
        assert ovs.vsctl("list-br") == bridge
        second = ovs.vswitchd
        assert second is not None
        second.kill()
        second.wait(10)
        time.sleep(1)
        assert ovs.vswitchd is second      # a stop: not started again
    finally:
        ovs.close()
    assert not os.path.exists(ovs.dir)


def _appctl(ovs: PrivateOVS) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", str(ovs.netns), "ovs-appctl", "-t",
         f"{ovs.dir}/ovs-vswitchd.ctl", "dpif/show"], capture_output=True,
        text=True, env=ovs.env, timeout=10, check=False)
    return "Bridge" if done.returncode == 0 and "netdev" in done.stdout \
        else ""
