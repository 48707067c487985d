"""Bridge binding: a pod's veth, its address and route, on a Linux bridge.

The same shape as the reference ``bridge`` CNI plugin, done with
:mod:`kuryr_supervisor.netlink`: a veth pair whose pod end lives in the pod's
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
* Safe from many threads at once: each call uses its own netlink handles
  and the bridge is created tolerating a concurrent creator.
"""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import ipaddress
import logging
from types import ModuleType
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor import netlink as _netlink

LOG = logging.getLogger(__name__)

HOST_PREFIX = "ksv"
"""Every host veth end starts with this (then 12 hex digits)."""
_TEMP_PREFIX = "kst"
_HASH_LEN = 12


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
    if isinstance(exc, _netlink.NetnsNotFound):
        return errors.ContainerUnknown(str(exc), f"errno={exc.errno}")
    return errors.PlumbingError(f"{what}: {exc}", f"errno={exc.errno}")


class BridgeBinding:
    """Plumbs pods onto ``bridge``; stateless apart from its settings."""

    def __init__(self, bridge: str = "kuryr0", mtu: int = 1500, *,
                 netlink_module: ModuleType | Any = _netlink) -> None:
        self.bridge = bridge
        self.mtu = mtu
        self._nl = netlink_module

    @staticmethod
    def host_ifname(container_id: str, ifname: str) -> str:
        """Deterministic host end name: ``ksv`` + 12 hex digits (15 chars)."""
        return HOST_PREFIX + _digest(container_id, ifname)

    @staticmethod
    def _temp_ifname(container_id: str, ifname: str) -> str:
        return _TEMP_PREFIX + _digest(container_id, ifname)

    def plumb(self, *, container_id: str, ifname: str, netns: str,
              address: ipaddress.IPv4Interface,
              gateway: ipaddress.IPv4Address) -> PlumbResult:
        """Create and configure the pod's interface; all or nothing."""
        nl = self._nl
        host = self.host_ifname(container_id, ifname)
        temp = self._temp_ifname(container_id, ifname)
        bridge_addr = ipaddress.IPv4Interface(
            f"{gateway}/{address.network.prefixlen}")
        created = False
        step = "open netns"
        try:
            with nl.open_netns(netns) as nsfd:
                with nl.handle() as ipr:
                    step = "ensure bridge"
                    bridge_idx = nl.ensure_bridge(ipr, self.bridge,
                                                  bridge_addr)
                    step = "create veth"
                    nl.create_veth(ipr, host, temp, mtu=self.mtu,
                                   peer_netns=nsfd)
                    created = True
                with nl.handle(nsfd) as ns:
                    step = "rename pod interface"
                    nl.set_link(ns, temp, new_name=ifname)
                    step = "set pod interface up"
                    nl.set_link(ns, ifname, mtu=self.mtu, up=True)
                    step = "add address"
                    nl.add_address(ns, ifname, address)
                    step = "add default route"
                    nl.add_default_route(ns, ifname, gateway)
                    step = "set loopback up"
                    nl.set_link(ns, "lo", up=True)
                    pod_mac = nl.get_link(ns, ifname).mac
                with nl.handle() as ipr:
                    step = "attach host end to bridge"
                    nl.set_link(ipr, host, master=bridge_idx, up=True)
                    host_mac = nl.get_link(ipr, host).mac
        except _netlink.NetlinkError as exc:
            self._rollback(host, created)
            if step == "rename pod interface" and exc.errno == errno.EEXIST:
                raise errors.AlreadyExists(
                    f"interface {ifname} already exists in netns {netns}",
                    f"errno={exc.errno}") from exc
            if step == "create veth" and exc.errno == errno.EEXIST:
                raise errors.AlreadyExists(
                    f"host interface {host} for {container_id}/{ifname} "
                    "already exists", f"errno={exc.errno}") from exc
            raise _plumbing_error(f"plumb {container_id}/{ifname}: {step}",
                                  exc) from exc
        except BaseException:
            self._rollback(host, created)
            raise
        LOG.debug("plumbed %s/%s: %s on %s, %s in %s", container_id, ifname,
                  host, self.bridge, address, netns)
        return PlumbResult(host_ifname=host, host_mac=host_mac,
                           pod_ifname=ifname, pod_mac=pod_mac, mtu=self.mtu)

    def _rollback(self, host: str, created: bool) -> None:
        """Delete the host end we created; the peer goes with it."""
        if not created:
            return
        try:
            with self._nl.handle() as ipr:
                self._nl.delete_link(ipr, host)
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
            with self._nl.handle() as ipr:
                gone = not self._nl.delete_link(ipr, host)
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
            with self._nl.handle() as ipr:
                self._nl.delete_link(ipr, host_ifname)
        except _netlink.NetlinkError as exc:
            raise _plumbing_error(f"remove host interface {host_ifname}",
                                  exc) from exc
