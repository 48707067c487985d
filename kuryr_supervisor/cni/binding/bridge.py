"""ADD and DEL of the bridge binding, and the bridge itself.

The same shape as the reference ``bridge`` CNI plugin, done with
:mod:`kuryr_supervisor.cni.netlink`: a veth pair whose pod end lives in the pod's
namespace under ``CNI_IFNAME`` and whose host end is a port of a bridge that
holds the gateway address.

Invariants:

* ``plumb`` is all or nothing: on any failure it deletes the host end it
  created (the kernel then deletes the peer) before raising. It never
  deletes a link it did not create.
* ``unplumb`` only deletes the host end: the peer dies with it, and nothing
  is removed by name inside the pod's namespace, where an interface of that
  name may belong to someone else.
* Safe from many threads at once: each call uses its own netlink sockets
  and the bridge is created tolerating a concurrent creator.
* The bridge is fully checked (created, gateway address, up) at most every
  :data:`BRIDGE_RECHECK` seconds; in between, every veth names it by index
  as its master, so a bridge deleted underneath fails that request, which
  is then retried once after a full check.
"""
from __future__ import annotations

import dataclasses
import errno
import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netlink as _netlink
from kuryr_supervisor.cni.binding.base import plumbing_error
from kuryr_supervisor.cni.binding.check import BridgeCheck
from kuryr_supervisor.cni.binding.hostends import HostEnds
from kuryr_supervisor.cni.binding.plumbing import (
    CONFIGURE_POD,
    CREATE_VETH,
    Plumbing,
)

LOG = logging.getLogger(__name__)

BRIDGE_RECHECK = 10.0
"""Seconds between full checks of the bridge (exists, address, up)."""
# What creating a veth with a vanished master index fails with.
_BRIDGE_GONE = frozenset({errno.EINVAL, errno.ENODEV})


@dataclasses.dataclass(frozen=True)
class PlumbResult:
    host_ifname: str
    host_mac: str
    pod_ifname: str
    pod_mac: str
    mtu: int


class BridgeBinding(BridgeCheck, HostEnds, Plumbing):
    """Plumbs pods onto ``bridge``; stateless apart from its settings and
    the bridge's cached index. CHECK is :class:`.check.BridgeCheck`'s, the
    listing and removal of leaked host ends :class:`.hostends.HostEnds`',
    ADD's error mapping and rollback :class:`.plumbing.Plumbing`'s."""

    def __init__(self, bridge: str = "kuryr0", mtu: int = 1500, *,
                 netlink_module: ModuleType | Any = _netlink,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(bridge, mtu, netlink_module=netlink_module)
        self._clock = clock
        self._bridge_lock = threading.Lock()
        # (gateway address, bridge index, when last fully checked)
        self._bridge_cache: tuple[ipaddress.IPv4Interface, int, float] | None
        self._bridge_cache = None

    def plumb(self, *, container_id: str, ifname: str, netns: str,
              address: ipaddress.IPv4Interface,
              gateway: ipaddress.IPv4Address,
              mac: str | None = None, iface_id: str | None = None,
              owner: str = "") -> PlumbResult:
        """Create and configure the pod's interface; all or nothing.

        Four netlink round trips: the veth pair is born final (names, MTU,
        MACs, up, host end on the bridge, peer in the pod's namespace) in
        one request, then the pod end's index, then its address, default
        route and loopback in one datagram. The MACs are chosen here (the
        pod's is ``mac`` when given, e.g. its Neutron port's), so no
        read-back is needed. ``iface_id`` and ``owner`` (the pod's port and
        UID) are for bindings a Neutron agent sees; a Linux bridge has no
        use for them.
        """
        nl = self._nl
        host = self.host_ifname(container_id, ifname)
        bridge_addr = ipaddress.IPv4Interface(
            f"{gateway}/{address.network.prefixlen}")
        host_mac, pod_mac = nl.random_mac(), mac or nl.random_mac()
        created = False
        step = "open netns"
        try:
            with nl.open_netns(netns) as nsfd:
                step = "ensure bridge"
                bridge_idx = self._ensure_bridge(bridge_addr)
                with nl.rtnl() as host_nl:
                    step = CREATE_VETH
                    try:
                        nl.new_veth(host_nl, host, ifname, mtu=self.mtu,
                                    host_mac=host_mac, peer_mac=pod_mac,
                                    peer_netns=nsfd, master=bridge_idx)
                    except _netlink.NetlinkError as exc:
                        if exc.errno not in _BRIDGE_GONE:
                            raise
                        # Our bridge was deleted (or replaced) underneath.
                        step = "ensure bridge"
                        bridge_idx = self._ensure_bridge(bridge_addr,
                                                         stale=bridge_idx)
                        step = CREATE_VETH
                        nl.new_veth(host_nl, host, ifname, mtu=self.mtu,
                                    host_mac=host_mac, peer_mac=pod_mac,
                                    peer_netns=nsfd, master=bridge_idx)
                    created = True
                with nl.rtnl(nsfd) as ns:
                    step = CONFIGURE_POD
                    nl.configure_pod(ns, nl.pod_index(ns, ifname), address,
                                     gateway)
        except _netlink.NetlinkError as exc:
            if created:
                self._rollback_veth(host)
            raise self._plumb_error(exc, step=step, container_id=container_id,
                                    ifname=ifname, netns=netns,
                                    address=address) from exc
        except BaseException:
            if created:
                self._rollback_veth(host)
            raise
        LOG.debug("plumbed %s/%s: %s on %s, %s in %s", container_id, ifname,
                  host, self.bridge, address, netns)
        return PlumbResult(host_ifname=host, host_mac=host_mac,
                           pod_ifname=ifname, pod_mac=pod_mac, mtu=self.mtu)

    def _ensure_bridge(self, gateway: ipaddress.IPv4Interface, *,
                       stale: int | None = None) -> int:
        """The bridge's index, fully checked at most every
        :data:`BRIDGE_RECHECK` seconds (or when ``stale``, the index a
        request just found gone, is still the cached one).

        Between full checks the veth creation itself is the check: it names
        the bridge by index as its master, so a deleted bridge fails it.
        """
        cached = self._bridge_cache
        if (cached is not None and cached[0] == gateway
                and cached[1] != stale
                and self._clock() - cached[2] < BRIDGE_RECHECK):
            return cached[1]
        with self._bridge_lock:
            cached = self._bridge_cache      # another thread may have done it
            if (cached is not None and cached[0] == gateway
                    and cached[1] != stale
                    and self._clock() - cached[2] < BRIDGE_RECHECK):
                return cached[1]
            with self._nl.rtnl() as nl:
                index = int(self._nl.ensure_bridge(nl, self.bridge, gateway))
            self._bridge_cache = (gateway, index, self._clock())
            return index

    def verify(self) -> None:
        """Raise BridgeConflict if the bridge name is another kind of link
        (a missing bridge is fine: the next ADD creates it)."""
        try:
            kind = self._nl.link_kind(self.bridge)
        except _netlink.NetlinkError as exc:
            raise plumbing_error(f"read bridge {self.bridge}", exc) from exc
        if kind is not None and kind != "bridge":
            raise errors.BridgeConflict(
                f"[binding] bridge: {self.bridge} exists and is a "
                f"{kind or 'plain'} link, not a bridge")

    def unplumb(self, *, container_id: str, ifname: str,
                netns: str | None) -> None:
        """Delete the pod's veth pair; fine when anything is already gone.

        ``netns`` is accepted for symmetry and logging only: deleting the
        host end deletes its peer wherever it is.
        """
        host = self.host_ifname(container_id, ifname)
        gone = not self._delete_host_end(
            host, f"unplumb {container_id}/{ifname}")
        LOG.debug("unplumbed %s/%s (%s%s, netns %s)", container_id, ifname,
                  host, " already gone" if gone else "", netns)
