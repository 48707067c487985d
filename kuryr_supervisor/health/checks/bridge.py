"""Readiness ``bridge`` (``[binding] driver = bridge``): the Linux bridge
the pods hang on is there, is a bridge and is up.

The Linux bridge binding's data plane is that bridge alone (its gateway
address, the node's routing): a bridge set down leaves every pod on it
without a network, and one deleted under running pods leaves their host
ends with no master (the next ADD makes a new bridge; the old pods stay
cut off). The first ADD creates the bridge, so a bridge never seen is
fine; once seen, its disappearance fails the check until one is back.
Another kind of link under the bridge's name fails the check, and is not
a bridge seen: no pod hangs on it, so once it is gone the next ADD makes
the bridge and the node is ready again.

Readiness, never liveness (restarting fixes none of it); an I/O check on
the HealthManager's timer, one netlink request per run (STATUS code 50
while it fails: :mod:`kuryr_supervisor.netcheck.node.dataplane`).
"""
from __future__ import annotations

from collections.abc import Callable

from kuryr_supervisor.cni import netlink
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort

Reader = Callable[[str], "netlink.Link | None"]


def read_link(name: str) -> netlink.Link | None:
    with netlink.rtnl() as nl:
        return netlink.read_link(nl, name)


class BridgeCheck(Check):
    name = "bridge"
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, bridge: str, *, read: Reader = read_link) -> None:
        self.bridge = bridge
        self._read = read
        self._seen = False

    def run(self, now: float) -> Result:
        try:
            link = self._read(self.bridge)
        except netlink.NetlinkError as exc:
            return Result.failed(f"cannot read bridge {self.bridge}: {exc}")
        if link is None:
            if self._seen:
                return Result.failed(
                    f"bridge {self.bridge} is gone: the pods plugged on it "
                    "have lost their network")
            return Result.passed(f"bridge {self.bridge} not made yet (the "
                                 "first ADD makes it)")
        if link.kind != "bridge":       # never a bridge: nothing plugged
            return Result.failed(f"{self.bridge} is a {link.kind or 'plain'} "
                                 "link, not a bridge")
        self._seen = True
        if not link.up:
            return Result.failed(f"bridge {self.bridge} is down: the pods "
                                 "on it have no network")
        shown = ", ".join(str(a) for a in link.addresses) or "no address"
        return Result.passed(f"bridge {self.bridge} up ({shown})")
