"""CHECK of the bridge binding: how a pod differs from what plumb made.

Read-only: it opens the pod's namespace and the host's through pyroute2
handles (decoding addresses and routes), so it is the first CHECK that
imports pyroute2, never an idle daemon.
"""
from __future__ import annotations

import ipaddress

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netlink as _netlink
from kuryr_supervisor.cni.binding.base import BindingBase, plumbing_error


class BridgeCheck(BindingBase):
    """Compares a pod's interface and host end with what plumb makes."""

    def check(self, *, container_id: str, ifname: str, netns: str,
              address: ipaddress.IPv4Interface,
              gateway: ipaddress.IPv4Address,
              iface_id: str | None = None) -> None:
        """Raise PlumbingError naming every way the pod differs from plumb.
        ``iface_id``: the pod's Neutron port, when known, for bindings whose
        host end names it (not the Linux bridge's)."""
        nl = self._nl
        problems: list[str] = []
        try:
            with nl.open_netns(netns) as nsfd, nl.handle(nsfd) as ns:
                if nl.link_index(ns, ifname) is None:
                    raise errors.PlumbingError(
                        f"check {container_id}/{ifname}: no {ifname} "
                        f"in netns {netns}")
                pod = nl.get_link(ns, ifname)
                pod_routes = nl.routes(ns)
            host_problems = self._host_problems(container_id, ifname, pod,
                                                iface_id)
        except _netlink.NetlinkError as exc:
            raise plumbing_error(f"check {container_id}/{ifname}",
                                 exc) from exc
        if address not in pod.addresses:
            problems.append(f"{ifname} lacks {address} "
                            f"(has {', '.join(map(str, pod.addresses))})")
        if pod.mtu != self.mtu:
            problems.append(f"{ifname} mtu {pod.mtu} != {self.mtu}")
        if not pod.up:
            problems.append(f"{ifname} is down")
        if not any(r.dst is None and r.gateway == gateway
                   and r.oif == pod.index for r in pod_routes):
            problems.append(f"no default route via {gateway} on {ifname}")
        problems.extend(host_problems)
        if problems:
            raise errors.PlumbingError(
                f"check {container_id}/{ifname}: {'; '.join(problems)}")

    def _host_problems(self, container_id: str, ifname: str,
                       pod: _netlink.Link,
                       iface_id: str | None = None) -> list[str]:
        """How the host end differs: missing, off the bridge or down."""
        nl = self._nl
        host = self.host_ifname(container_id, ifname)
        with nl.handle() as ipr:
            host_link = (nl.get_link(ipr, host)
                         if nl.link_index(ipr, host) is not None else None)
            bridge_idx = nl.link_index(ipr, self.bridge)
        if host_link is None:
            return [f"host end {host} is missing"]
        if bridge_idx is None or host_link.master != bridge_idx:
            return [f"host end {host} is not on bridge {self.bridge}"]
        if not host_link.up:
            return [f"host end {host} is down"]
        return []
