"""The Open vSwitch side of the OVS binding: the port a pod's host end
becomes on the integration bridge, CHECK of it, GC's listing and removal
of ours, and ``iface-id`` pointed at a pod's port the controller made
again (:meth:`OvsPorts.repoint`).

Which ports are ours: a port of the integration bridge named like our host
ends (:data:`.base.HOST_PREFIX` then 12 hex digits) whose Interface carries
``external_ids:kuryr-supervisor=cni`` (:data:`MARK`). Another plugin's
ports, an OVS agent's or a VM's, never carry it and are never touched, even
if one were named like ours.

OVSDB failures become CNI errors here (:func:`ovsdb_error`): an
unreachable or hung database, or a missing integration bridge, is the
node's (code 11, never counted: readiness ``ovsdb`` names it); anything
else the database refuses is ours (code 100, counted).
"""
from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netlink as _netlink
from kuryr_supervisor.cni import ovsdb as _ovsdb
from kuryr_supervisor.cni.binding.base import HASH_LEN, HOST_PREFIX
from kuryr_supervisor.cni.binding.check import BridgeCheck

#: The external_ids key (and value) that marks an Interface as ours.
MARK = _ovsdb.MARK


def ovsdb_error(what: str, exc: _ovsdb.OvsdbError,
                bridge: str) -> errors.CNIError:
    """The CNI error for an OVSDB failure (see the module docstring)."""
    if isinstance(exc, _ovsdb.OvsdbUnavailable):
        return errors.OvsdbUnavailable(f"{what}: {exc}")
    if "no bridge named" in str(exc):
        return errors.OvsdbUnavailable(
            f"{what}: integration bridge {bridge} does not exist "
            "([binding] ovs_bridge; OVN's controller or the OVS agent "
            "creates it)")
    return errors.PlumbingError(f"{what}: OVSDB: {exc}")


def external_ids(*, iface_id: str, mac: str, owner: str) -> dict[str, str]:
    """What os-vif's OVS plug and Kuryr write on the Interface, and ours."""
    ids = {"iface-id": iface_id, "attached-mac": mac.lower(),
           "iface-status": "active", MARK[0]: MARK[1]}
    if owner:
        ids["vm-uuid"] = owner
    return ids


def is_ours_by_name(name: str) -> bool:
    return (name.startswith(HOST_PREFIX)
            and len(name) == len(HOST_PREFIX) + HASH_LEN
            and all(c in "0123456789abcdef" for c in name[len(HOST_PREFIX):]))


class OvsPorts(BridgeCheck):
    """CHECK (the pod side is :class:`.check.BridgeCheck`'s), GC's listing
    and removal, and a pod's interface pointed at its port made again,
    over one OVSDB adapter."""

    #: The host end names the pod's Neutron port (CHECK compares it).
    names_port = True

    def __init__(self, bridge: str = "br-int", mtu: int = 1500, *,
                 ovsdb: _ovsdb.Ovsdb,
                 netlink_module: ModuleType | Any = _netlink) -> None:
        super().__init__(bridge, mtu, netlink_module=netlink_module)
        self.ovsdb = ovsdb

    def _host_problems(self, container_id: str, ifname: str,
                       pod: _netlink.Link,
                       iface_id: str | None = None) -> list[str]:
        """The host end is a port of the integration bridge whose
        Interface is ours and names the pod's MAC and its port (``iface_id``
        when known, else any)."""
        host = self.host_ifname(container_id, ifname)
        where = f"check {container_id}/{ifname}"
        try:
            ports = self.ovsdb.ports(self.bridge)
            iface = self.ovsdb.interface(host)
        except _ovsdb.OvsdbError as exc:
            raise ovsdb_error(where, exc, self.bridge) from exc
        problems = []
        if host not in ports:
            problems.append(f"host end {host} is not a port of "
                            f"{self.bridge}")
        ids: Mapping[str, str] = (iface or {}).get("external_ids") or {}
        if iface is None:
            problems.append(f"OVSDB has no interface {host}")
        elif ids.get(MARK[0]) != MARK[1]:
            problems.append(f"interface {host} is not kuryr-supervisor's")
        elif not ids.get("iface-id"):
            problems.append(f"interface {host} has no iface-id")
        elif iface_id and ids["iface-id"] != iface_id:
            problems.append(f"interface {host} iface-id {ids['iface-id']} "
                            f"is not the pod's port {iface_id}")
        elif ids.get("attached-mac", "").lower() != pod.mac.lower():
            problems.append(f"interface {host} attached-mac "
                            f"{ids.get('attached-mac')} != {pod.mac}")
        with self._nl.handle() as ipr:
            up = (self._nl.get_link(ipr, host).up
                  if self._nl.link_index(ipr, host) is not None else None)
        if up is None:
            problems.append(f"host end {host} is missing")
        elif not up:
            problems.append(f"host end {host} is down")
        return problems

    def iface_id(self, container_id: str, ifname: str) -> str | None:
        """The iface-id the pod's port carries on the bridge (None: none)."""
        host = self.host_ifname(container_id, ifname)
        try:
            iface = self.ovsdb.interface(host)
        except _ovsdb.OvsdbError as exc:
            raise ovsdb_error(f"read interface {host}", exc,
                              self.bridge) from exc
        ids = (iface or {}).get("external_ids") or {}
        return ids.get("iface-id") or None

    def repoint(self, owner: str, mac: str, port_id: str) -> str:
        """Point the interface of pod ``owner`` (its UID) at its Neutron
        port ``port_id``: the port the pod's PodPort names was made again
        under a new id, with the same address and MAC, and OVN or the OVS
        agent binds a port by the ``iface-id`` the interface carries. Only
        our interface with the pod's UID and that MAC is changed. Returns
        the interface pointed ("": none here, or already that port);
        :class:`~kuryr_supervisor.errors.PlumbingError` when the pod's
        interface has another MAC (it cannot be that port)."""
        try:
            rows = self.ovsdb.owned_by(owner)
            for row in rows:
                ids: dict[str, str] = dict(row.get("external_ids") or {})
                if ids.get("iface-id") == port_id:
                    continue
                name = str(row["name"])
                if ids.get("attached-mac", "").lower() != mac.lower():
                    raise errors.PlumbingError(
                        f"interface {name} of pod {owner} has MAC "
                        f"{ids.get('attached-mac')}, not port {port_id}'s "
                        f"{mac}: not pointed at it")
                self.ovsdb.set_iface_id(name, ids, port_id)
                return name
        except _ovsdb.OvsdbError as exc:
            raise ovsdb_error(f"point pod {owner}'s interface at port "
                              f"{port_id}", exc, self.bridge) from exc
        return ""

    def host_interfaces(self) -> list[str]:
        """Our ports on the integration bridge (for GC of leaks)."""
        try:
            ports = set(self.ovsdb.ports(self.bridge))
            marked = set(self.ovsdb.marked(*MARK))
        except _ovsdb.OvsdbError as exc:
            raise ovsdb_error("list host interfaces", exc,
                              self.bridge) from exc
        return sorted(n for n in ports & marked if is_ours_by_name(n))

    def remove_host_interface(self, host_ifname: str) -> None:
        """Remove a leaked port and its veth (the peer goes with it).
        Idempotent; refuses a name this binding would never have made."""
        if not is_ours_by_name(host_ifname):
            raise ValueError(f"{host_ifname} is not a host veth end")
        self.remove_port(host_ifname)
        self._delete_host_end(host_ifname,
                              f"remove host interface {host_ifname}")

    def remove_port(self, host: str) -> None:
        """Take ``host`` off the bridge if it is there."""
        try:
            self.ovsdb.del_port(self.bridge, host)
        except _ovsdb.OvsdbError as exc:
            if "no bridge named" in str(exc):
                return          # no bridge: no port of ours on it either
            raise ovsdb_error(f"remove port {host}", exc,
                              self.bridge) from exc
