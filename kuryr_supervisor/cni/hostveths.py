"""GC's view of host veth ends: only this binding's bridge, and removal by name.

Role: :class:`BridgeBinding` lists every ``ksv*`` veth on the host and can
remove a pair only by (container id, ifname); GC needs the veths of *its*
bridge and must delete one whose owner is unknown. This thin subclass adds
exactly that (a candidate to fold into :mod:`kuryr_supervisor.binding`).

Invariant: only veths whose master is this binding's bridge are ever
offered for deletion. A veth without a master is half-plumbed; its
allocation exists (allocation precedes plumbing), so GC reaches it through
the allocation instead, and another daemon's (or test's) half-plumbed veth
on the same host is never touched.
"""
from __future__ import annotations

from kuryr_supervisor import errors
from kuryr_supervisor import netlink as _netlink
from kuryr_supervisor.binding import HOST_PREFIX, BridgeBinding


class GcBridgeBinding(BridgeBinding):
    """A :class:`BridgeBinding` with the two operations GC needs."""

    def host_interfaces(self) -> list[str]:
        """Host veth ends attached to this binding's bridge."""
        names = set(super().host_interfaces())
        try:
            with self._nl.handle() as ipr:
                bridge = self._nl.link_index(ipr, self.bridge)
                if bridge is None:
                    return []
                links = self._nl.list_links(ipr, HOST_PREFIX)
        except _netlink.NetlinkError as exc:
            raise errors.PlumbingError(f"list host interfaces: {exc}") from exc
        return sorted(link.name for link in links
                      if link.name in names and link.master == bridge)

    def remove_host_interface(self, host_ifname: str) -> None:
        """Delete a leaked host end (its peer goes with it); idempotent."""
        if not host_ifname.startswith(HOST_PREFIX):
            raise ValueError(f"{host_ifname} is not a host veth end")
        try:
            with self._nl.handle() as ipr:
                self._nl.delete_link(ipr, host_ifname)
        except _netlink.NetlinkError as exc:
            raise errors.PlumbingError(
                f"remove host interface {host_ifname}: {exc}") from exc
