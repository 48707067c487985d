"""The node port plugged: an OVS internal port on the integration bridge,
whose interface ovs-vswitchd makes in its own namespace (the node's, where
the daemon and the kubelet run), configured from there.

The port's Interface carries what a pod's carries (``iface-id`` = the
Neutron port, ``attached-mac``, ``iface-status``, ``vm-uuid`` = the node's
name, and our mark, :func:`~kuryr_supervisor.cni.binding.ovsports.
external_ids`), so ovn-controller binds the Neutron port to this chassis
and installs its flows (``ovn-installed``) as for a pod; ``type=internal``
and ``mac`` make ovs-vswitchd create the interface with the port's MAC.
Its name (``[node_port] ifname``) is not a pod's host end, so GC never
takes it.

The interface then gets the port's MAC and MTU, comes up, holds the
port's address alone (its prefix route: the pod subnet, on-link) and,
with a service range, a route for it via the subnet's gateway (the
router OVN's load balancers sit on, as on the logical switch). On the
userspace datapath (``[binding] ovs_tx_checksum_off``) its transmit
checksum offload is switched off, as a pod's: OVS's userspace datapath
never completes a partial checksum, so the node's TCP would fail. On
that datapath too, the pods' host ends (veths that ovs-vswitchd reads
through packet sockets) stay in the node's IP stack, which would answer
a pod's ARP for the node port's address through the pod's own host end
(Linux answers for any local address on any interface), and the pod's
packets would then miss OVN; so ``net.ipv4.conf.all.arp_ignore`` is
raised to 1 in the node's namespace (answer only on the interface that
holds the address, as kube-proxy's IPVS mode sets it). The kernel
datapath takes the host ends' packets before the IP stack sees them, and
there nothing is changed. Each
:meth:`NodePortPlug.plug` checks every part (the monitor, one link read,
one route dump, one ethtool read) and writes only what differs: a port deleted behind our
back, its link gone or its address flushed is made again at the next
look.
"""
from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

from kuryr_supervisor.cni import netlink, ovsdb
from kuryr_supervisor.cni.binding.ovsports import MARK, external_ids
from kuryr_supervisor.cni.netlink import hostport
from kuryr_supervisor.cni.ovsdb import ovnlocal
from kuryr_supervisor.netcheck.codecs.nodeportspec import NodePort

LOG = logging.getLogger(__name__)


#: The sysctl raised on the userspace datapath (see the module).
ARP_IGNORE = "/proc/sys/net/ipv4/conf/all/arp_ignore"


#: The kinds of an OVS internal port's interface: the kernel datapath's,
#: the userspace datapath's (a tap).
KINDS = ("openvswitch", "tun")


class NotYet(Exception):
    """The interface is not there yet (ovs-vswitchd makes it)."""


class NodePortPlug:
    """Plugs one node port at a time on ``bridge`` as ``ifname`` in this
    process's namespace; ``owner`` is the node's name, ``service_cidr``
    the service range routed through it (None: none); ``rtnl`` opens the
    netlink socket (a test's)."""

    def __init__(self, db: ovsdb.Ovsdb, *, bridge: str, ifname: str,
                 mtu: int, owner: str,
                 service_cidr: ipaddress.IPv4Network | None = None,
                 checksum_off: Callable[[], bool] = lambda: False,
                 userspace: Callable[[], bool] = lambda: False,
                 sysctl: str = ARP_IGNORE,
                 rtnl: Callable[[], AbstractContextManager[netlink.Rtnl]]
                 = netlink.rtnl) -> None:
        self.db, self.bridge, self.ifname = db, bridge, ifname
        self.mtu, self.owner, self.service_cidr = mtu, owner, service_cidr
        self._checksum_off, self._rtnl = checksum_off, rtnl
        self._userspace, self._sysctl = userspace, sysctl
        self.port: NodePort | None = None
        #: The service route this plug made last (None: none).
        self._routed: hostport.Route | None = None

    def plug(self, port: NodePort) -> list[str]:
        """``port`` plugged as it should be (see the module); what was
        (re)made, empty when all was right. :class:`NotYet` while the
        interface is not there; OvsdbError, NetlinkError otherwise."""
        made = []
        if self._ovs(port):
            made.append("port")
        self.port = port
        error = (self.db.our_interface(self.ifname) or {}).get("error")
        if error:
            raise NotYet(f"ovs-vswitchd cannot make {self.ifname}: {error}")
        with self._rtnl() as nl:
            link = netlink.read_link(nl, self.ifname)
            if link is None:
                raise NotYet(f"{self.ifname} is not in this namespace yet "
                             "(ovs-vswitchd makes it)")
            if link.kind not in KINDS:
                raise NotYet(f"{self.ifname} here is a {link.kind or 'link'} "
                             "of someone else's, not OVS's internal port")
            if hostport.set_link(nl, link, mac=port.mac, mtu=self.mtu):
                made.append("link")
            if hostport.set_address(nl, link, port.address):
                made.append("address")
            if self._checksum_off() and netlink.tx_checksum(
                    self.ifname, sock=nl.socket):
                netlink.tx_checksum(self.ifname, enable=False, sock=nl.socket)
                made.append("transmit checksum offload off")
            if self._service_route(nl, link.index, port):
                made.append("service route")
        if self._userspace() and self._arp_ignore():
            made.append("arp_ignore 1")
        return made

    def _arp_ignore(self) -> bool:
        """``arp_ignore`` at least 1 (see the module); whether written."""
        with open(self._sysctl, "r+", encoding="ascii") as f:
            if int(f.read().strip() or 0) >= 1:
                return False
            f.seek(0)
            f.write("1\n")
        return True

    def _ovs(self, port: NodePort) -> bool:
        """The port on the bridge with its Interface as it should be;
        whether it had to be written."""
        row = self.db.our_interface(self.ifname)
        ids = external_ids(iface_id=port.port_id, mac=port.mac,
                           owner=self.owner)
        have = (row or {}).get("external_ids") or {}
        if row is not None and all(have.get(k) == v for k, v in ids.items()):
            return False
        self.db.add_port(self.bridge, self.ifname, ids, self.mtu,
                         internal_mac=port.mac)
        return True

    def _service_route(self, nl: netlink.Rtnl, index: int,
                       port: NodePort) -> bool:
        """The service range routed via the port's gateway: the node's
        ``[node_port] service_cidr``, else the spec's (the controller's
        service subnet); a range routed before and no longer wanted is
        taken out. Whether anything was written."""
        cidr, gateway = self.service_cidr or port.service_cidr, port.gateway
        want = hostport.Route(cidr, gateway, index) \
            if cidr is not None and gateway is not None else None
        changed = False
        old = self._routed
        if old is not None and old != want and old.gateway is not None:
            changed = hostport.delete_route(nl, old.oif or index, old.dst,
                                            old.gateway)
        self._routed = want
        if cidr is None or gateway is None or want in hostport.routes(nl):
            return changed
        hostport.replace_route(nl, index, cidr, gateway)
        return True

    def unplug(self) -> bool:
        """The port off the bridge (its interface goes with it); whether
        there was one of ours."""
        row = self.db.our_interface(self.ifname)
        self.db.del_port(self.bridge, self.ifname)
        self.port = None
        self._routed = None     # the kernel took it out with the link
        return row is not None and \
            (row.get("external_ids") or {}).get(MARK[0]) == MARK[1]

    def installed(self) -> bool:
        """Whether ovn-controller installed the plugged port's flows."""
        if self.port is None:
            return False
        row = self.db.our_interface(self.ifname)
        return row is not None and ovnlocal.installed(row) and \
            (row.get("external_ids") or {}).get("iface-id") == \
            self.port.port_id
