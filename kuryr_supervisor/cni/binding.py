"""Bridge binding: a pod's veth, its address and route, on a Linux bridge.

The same shape as the reference ``bridge`` CNI plugin, done with
:mod:`kuryr_supervisor.cni.netlink`: a veth pair whose pod end lives in the pod's
namespace under ``CNI_IFNAME`` and whose host end is a port of a bridge that
holds the gateway address.

Invariants:

* The host end's name is a pure function of (container id, ifname), so DEL
  and GC find it without any state, and every host end this binding creates
  shares one prefix (:data:`HOST_PREFIX`).
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
import hashlib
import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netlink as _netlink

LOG = logging.getLogger(__name__)

HOST_PREFIX = "ksv"
"""Every host veth end starts with this (then 12 hex digits)."""
_HASH_LEN = 12
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


def _digest(container_id: str, ifname: str) -> str:
    key = f"{container_id}/{ifname}".encode()
    return hashlib.sha256(key).hexdigest()[:_HASH_LEN]


def _plumbing_error(what: str, exc: _netlink.NetlinkError) -> errors.CNIError:
    """Netlink failures by cause: the pod's namespace gone (the caller's),
    the bridge name taken or no CAP_NET_ADMIN (the node's: not counted,
    readiness names them), anything else (ours: counted)."""
    if isinstance(exc, _netlink.NetnsNotFound):
        return errors.ContainerUnknown(str(exc), f"errno={exc.errno}")
    if isinstance(exc, _netlink.WrongLinkKind):
        return errors.BridgeConflict(f"[binding] bridge: {exc}",
                                     f"errno={exc.errno}")
    if exc.errno == errno.EPERM:
        return errors.NoNetAdmin(f"{what}: {exc} (CAP_NET_ADMIN missing?)",
                                 f"errno={exc.errno}")
    return errors.PlumbingError(f"{what}: {exc}", f"errno={exc.errno}")


class BridgeBinding:
    """Plumbs pods onto ``bridge``; stateless apart from its settings."""

    def __init__(self, bridge: str = "kuryr0", mtu: int = 1500, *,
                 netlink_module: ModuleType | Any = _netlink,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bridge = bridge
        self.mtu = mtu
        self._nl = netlink_module
        self._clock = clock
        self._bridge_lock = threading.Lock()
        # (gateway address, bridge index, when last fully checked)
        self._bridge_cache: tuple[ipaddress.IPv4Interface, int, float] | None
        self._bridge_cache = None

    @staticmethod
    def host_ifname(container_id: str, ifname: str) -> str:
        """Deterministic host end name: ``ksv`` + 12 hex digits (15 chars)."""
        return HOST_PREFIX + _digest(container_id, ifname)

    def plumb(self, *, container_id: str, ifname: str, netns: str,
              address: ipaddress.IPv4Interface,
              gateway: ipaddress.IPv4Address,
              mac: str | None = None) -> PlumbResult:
        """Create and configure the pod's interface; all or nothing.

        Four netlink round trips: the veth pair is born final (names, MTU,
        MACs, up, host end on the bridge, peer in the pod's namespace) in
        one request, then the pod end's index, then its address, default
        route and loopback in one datagram. The MACs are chosen here (the
        pod's is ``mac`` when given, e.g. its Neutron port's), so no
        read-back is needed.
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
                    step = "create veth"
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
                        step = "create veth"
                        nl.new_veth(host_nl, host, ifname, mtu=self.mtu,
                                    host_mac=host_mac, peer_mac=pod_mac,
                                    peer_netns=nsfd, master=bridge_idx)
                    created = True
                with nl.rtnl(nsfd) as ns:
                    step = "configure pod interface"
                    nl.configure_pod(ns, nl.pod_index(ns, ifname), address,
                                     gateway)
        except _netlink.NetlinkError as exc:
            self._rollback(host, created)
            if step == "create veth" and exc.errno == errno.EEXIST:
                raise self._which_exists(container_id, ifname, netns,
                                         exc) from exc
            if step == "configure pod interface" and exc.errno == errno.EEXIST:
                # The pod's namespace already has a default route (another
                # interface's) or this address: the request's doing, not ours.
                raise errors.AlreadyExists(
                    f"netns {netns} already has a default route or "
                    f"{address}: {ifname} cannot be configured there",
                    f"errno={exc.errno}") from exc
            raise _plumbing_error(f"plumb {container_id}/{ifname}: {step}",
                                  exc) from exc
        except BaseException:
            self._rollback(host, created)
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
            raise _plumbing_error(f"read bridge {self.bridge}", exc) from exc
        if kind is not None and kind != "bridge":
            raise errors.BridgeConflict(
                f"[binding] bridge: {self.bridge} exists and is a "
                f"{kind or 'plain'} link, not a bridge")

    def _which_exists(self, container_id: str, ifname: str, netns: str,
                      exc: _netlink.NetlinkError) -> errors.CNIError:
        """EEXIST from the veth creation: the host end, or the pod's name?"""
        host = self.host_ifname(container_id, ifname)
        try:
            with self._nl.rtnl() as nl:
                host_taken = nl.index(host) is not None
        except (OSError, _netlink.NetlinkError):
            return errors.AlreadyExists(
                f"host interface {host} or interface {ifname} in netns "
                f"{netns} already exists", f"errno={exc.errno}")
        if host_taken:
            return errors.AlreadyExists(
                f"host interface {host} for {container_id}/{ifname} "
                "already exists", f"errno={exc.errno}")
        return errors.AlreadyExists(
            f"interface {ifname} already exists in netns {netns}",
            f"errno={exc.errno}")

    def _rollback(self, host: str, created: bool) -> None:
        """Delete the host end we created; the peer goes with it."""
        if not created:
            return
        try:
            with self._nl.rtnl() as nl:
                self._nl.remove_link(nl, host)
        except _netlink.NetlinkError as exc:
            LOG.error("rollback: could not delete %s: %s", host, exc)

    def unplumb(self, *, container_id: str, ifname: str,
                netns: str | None) -> None:
        """Delete the pod's veth pair; fine when anything is already gone.

        ``netns`` is accepted for symmetry and logging only: deleting the
        host end deletes its peer wherever it is.
        """
        host = self.host_ifname(container_id, ifname)
        try:
            with self._nl.rtnl() as nl:
                gone = not self._nl.remove_link(nl, host)
        except _netlink.NetlinkError as exc:
            raise _plumbing_error(f"unplumb {container_id}/{ifname}",
                                  exc) from exc
        LOG.debug("unplumbed %s/%s (%s%s, netns %s)", container_id, ifname,
                  host, " already gone" if gone else "", netns)

    def check(self, *, container_id: str, ifname: str, netns: str,
              address: ipaddress.IPv4Interface,
              gateway: ipaddress.IPv4Address) -> None:
        """Raise PlumbingError naming every way the pod differs from plumb."""
        nl = self._nl
        host = self.host_ifname(container_id, ifname)
        problems: list[str] = []
        try:
            with nl.open_netns(netns) as nsfd, nl.handle(nsfd) as ns:
                if nl.link_index(ns, ifname) is None:
                    raise errors.PlumbingError(
                        f"check {container_id}/{ifname}: no {ifname} "
                        f"in netns {netns}")
                pod = nl.get_link(ns, ifname)
                pod_routes = nl.routes(ns)
            with nl.handle() as ipr:
                host_link = (nl.get_link(ipr, host)
                             if nl.link_index(ipr, host) is not None else None)
                bridge_idx = nl.link_index(ipr, self.bridge)
        except _netlink.NetlinkError as exc:
            raise _plumbing_error(f"check {container_id}/{ifname}",
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
        if host_link is None:
            problems.append(f"host end {host} is missing")
        elif bridge_idx is None or host_link.master != bridge_idx:
            problems.append(f"host end {host} is not on bridge {self.bridge}")
        elif not host_link.up:
            problems.append(f"host end {host} is down")
        if problems:
            raise errors.PlumbingError(
                f"check {container_id}/{ifname}: {'; '.join(problems)}")

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
            raise _plumbing_error("list host interfaces", exc) from exc
        return sorted(
            link.name for link in links
            if link.kind == "veth" and link.master == bridge
            and len(link.name) == len(HOST_PREFIX) + _HASH_LEN
            and all(c in "0123456789abcdef"
                    for c in link.name[len(HOST_PREFIX):]))

    def remove_host_interface(self, host_ifname: str) -> None:
        """Delete a leaked host end by name (its peer goes with it).

        For GC of a veth whose (container id, ifname) is no longer known.
        Idempotent; refuses a name this binding would never have made.
        """
        if not host_ifname.startswith(HOST_PREFIX):
            raise ValueError(f"{host_ifname} is not a host veth end")
        try:
            with self._nl.rtnl() as nl:
                self._nl.remove_link(nl, host_ifname)
        except _netlink.NetlinkError as exc:
            raise _plumbing_error(f"remove host interface {host_ifname}",
                                  exc) from exc
