"""The private Open vSwitch fixture (``tests/fixtures/ovs``) leaves
nothing behind, in the host's namespace and inside a namespace of its own:
its daemons gone, its directory removed, its tap devices deleted."""
from __future__ import annotations

import os
import secrets

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
