"""GC's side of the bridge binding: the host veth ends it owns, and the
removal of one whose (container id, ifname) is no longer known.

Invariant: only veths named like ours (:data:`.base.HOST_PREFIX` then
:data:`.base.HASH_LEN` hex digits) *and* enslaved to this binding's bridge
are listed, and only a name with our prefix is removed.
"""
from __future__ import annotations

from kuryr_supervisor.cni import netlink as _netlink
from kuryr_supervisor.cni.binding.base import (
    HASH_LEN,
    HOST_PREFIX,
    BindingBase,
    plumbing_error,
)


class HostEnds(BindingBase):
    """Lists and removes host veth ends on this binding's bridge."""

    def host_interfaces(self) -> list[str]:
        """Host veth ends on *this* binding's bridge (for GC of leaks).

        Only veths enslaved to our bridge are offered: another daemon's (or
        test's) veths on the same host are never touched, and a half-plumbed
        veth with no master is reached through its allocation instead
        (allocation precedes plumbing).
        """
        try:
            with self._nl.handle() as ipr:
                bridge = self._nl.link_index(ipr, self.bridge)
                if bridge is None:
                    return []
                links = self._nl.list_links(ipr, HOST_PREFIX)
        except _netlink.NetlinkError as exc:
            raise plumbing_error("list host interfaces", exc) from exc
        return sorted(
            link.name for link in links
            if link.kind == "veth" and link.master == bridge
            and len(link.name) == len(HOST_PREFIX) + HASH_LEN
            and all(c in "0123456789abcdef"
                    for c in link.name[len(HOST_PREFIX):]))

    def remove_host_interface(self, host_ifname: str) -> None:
        """Delete a leaked host end by name (its peer goes with it).

        For GC of a veth whose (container id, ifname) is no longer known.
        Idempotent; refuses a name this binding would never have made.
        """
        if not host_ifname.startswith(HOST_PREFIX):
            raise ValueError(f"{host_ifname} is not a host veth end")
        self._delete_host_end(host_ifname,
                              f"remove host interface {host_ifname}")
