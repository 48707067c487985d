"""ADD and DEL of the Open vSwitch binding (``[binding] driver = ovs``).

A pod's veth pair as in the bridge binding, but the host end has no Linux
master: it becomes a port of the integration bridge whose Interface carries
``external_ids`` ``iface-id`` (the pod's Neutron port), ``attached-mac``,
``iface-status=active``, ``vm-uuid`` (the pod's UID) and our mark, as
os-vif's OVS plug writes them. The node's OVN controller (or OVS agent)
reads them, binds the Neutron port to this node and wires it; nothing here
creates the bridge or any flow.

Invariants:

* ``plumb`` is all or nothing: the port (one OVSDB transaction) is sent
  once the veth exists and committed while the pod's side is configured
  (address, route, MAC, checksum offload); ADD returns only when both are
  done. On any failure the port (if it was added) and the veth are
  removed before raising.
* ``unplumb`` takes the port off the bridge, then deletes the host end (the
  peer dies with it); both steps are fine when already done, so a second
  DEL (containerd sends one with an empty CNI_NETNS) answers 0.
* The bridge's ``datapath_type`` is read from the OVSDB connection's
  monitor (no round trip); with ``netdev`` (the userspace datapath)
  transmit checksum offload is switched off on the pod's interface when
  ``[binding] ovs_tx_checksum_off`` is ``auto``.
* One OVSDB connection per process, held (:mod:`kuryr_supervisor.cni.
  ovsdb`): opened at the first use after the fork, :meth:`OvsBinding.
  close` drops it (the next use opens it again).
"""
from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netlink as _netlink
from kuryr_supervisor.cni import ovsdb as _ovsdb
from kuryr_supervisor.cni.binding.bridge import PlumbResult
from kuryr_supervisor.cni.binding.ovsports import OvsPorts, external_ids, ovsdb_error
from kuryr_supervisor.cni.binding.plumbing import (
    CONFIGURE_POD,
    CREATE_VETH,
    Plumbing,
)
from kuryr_supervisor.cni.ovsdb import ovnlocal

LOG = logging.getLogger(__name__)


class OvsBinding(OvsPorts, Plumbing):
    """Plumbs pods onto the integration bridge ``bridge``; stateless apart
    from its settings and the bridge's cached datapath type. ADD's netlink
    error mapping and the veth's rollback are :class:`.plumbing.Plumbing`'s."""

    def __init__(self, bridge: str = "br-int", mtu: int = 1500, *,
                 ovsdb: _ovsdb.Ovsdb, tx_checksum_off: str = "auto",
                 ovn_rundir: str = "/run/ovn",
                 netlink_module: ModuleType | Any = _netlink,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(bridge, mtu, ovsdb=ovsdb,
                         netlink_module=netlink_module)
        self.tx_checksum_off = tx_checksum_off
        self._clock = clock
        self._datapath: str | None = None
        self.ovn = ovnlocal.OvnLocal(ovsdb, ovn_rundir)

    def plumb(self, *, container_id: str, ifname: str, netns: str,
              address: ipaddress.IPv4Interface,
              gateway: ipaddress.IPv4Address, mac: str | None = None,
              iface_id: str | None = None, owner: str = "") -> PlumbResult:
        """Create the pod's interface, then its port; all or nothing."""
        if not iface_id:
            raise errors.InvalidEnvironment(
                "[binding] driver = ovs needs the pod's Neutron port (the "
                "PodPort, [cni_daemon] address_source = podport)")
        nl = self._nl
        host = self.host_ifname(container_id, ifname)
        host_mac, pod_mac = nl.random_mac(), mac or nl.random_mac()
        checksum_off = self._checksum_off()
        created = False
        adding: Callable[[], None] | None = None
        step = "open netns"
        try:
            with nl.open_netns(netns) as nsfd:
                with nl.rtnl() as host_nl:
                    step = CREATE_VETH
                    nl.new_veth(host_nl, host, ifname, mtu=self.mtu,
                                host_mac=host_mac, peer_mac=pod_mac,
                                peer_netns=nsfd, master=None)
                    created = True
                # The port's transaction goes now; the pod's side is done
                # while the database commits it.
                adding = self.ovsdb.begin_add_port(
                    self.bridge, host, external_ids(
                        iface_id=iface_id, mac=pod_mac, owner=owner),
                    self.mtu)
                with nl.rtnl(nsfd) as ns:
                    step = CONFIGURE_POD
                    nl.configure_pod(ns, nl.pod_index(ns, ifname), address,
                                     gateway)
                    if checksum_off:
                        step = "switch transmit checksum offload off"
                        nl.tx_checksum(ifname, enable=False, sock=ns.socket)
            done, adding = adding, None
            done()
        except _ovsdb.OvsdbError as exc:
            # A hung database would hang the port's removal too: GC removes
            # a port it committed late (ours, owned by no allocation).
            self._rollback(host, created, False)
            raise ovsdb_error(f"plumb {container_id}/{ifname}: add port "
                              f"{host} to {self.bridge}", exc,
                              self.bridge) from exc
        except _netlink.NetlinkError as exc:
            self._rollback(host, created, self._added(adding))
            raise self._plumb_error(exc, step=step, container_id=container_id,
                                    ifname=ifname, netns=netns,
                                    address=address) from exc
        except BaseException:
            self._rollback(host, created, self._added(adding))
            raise
        LOG.debug("plumbed %s/%s: %s on %s (iface-id %s), %s in %s",
                  container_id, ifname, host, self.bridge, iface_id, address,
                  netns)
        return PlumbResult(host_ifname=host, host_mac=host_mac,
                           pod_ifname=ifname, pod_mac=pod_mac, mtu=self.mtu)

    @staticmethod
    def _added(adding: Callable[[], None] | None) -> bool:
        """Whether a port transaction sent (and not finished) committed:
        waited for, so the rollback knows whether to remove the port."""
        if adding is None:
            return False
        try:
            adding()
        except _ovsdb.OvsdbError:
            return False    # refused, or hung (then GC removes it)
        return True

    def _checksum_off(self) -> bool:
        """Whether to switch transmit checksum offload off (see the module
        docstring); reads the bridge, so a missing bridge fails ADD here,
        before anything is made."""
        if self.tx_checksum_off in ("true", "false"):
            return self.tx_checksum_off == "true"
        return self.datapath_type() == "netdev"

    def datapath_type(self) -> str:
        """The bridge's datapath_type ("" is the kernel's, ``system``), as
        the OVSDB connection's monitor has it."""
        try:
            kind = self.ovsdb.datapath_type(self.bridge)
        except _ovsdb.OvsdbError as exc:
            raise ovsdb_error(f"read bridge {self.bridge}", exc,
                              self.bridge) from exc
        if kind is None:
            self._datapath = None
            raise errors.OvsdbUnavailable(
                f"integration bridge {self.bridge} does not exist "
                "([binding] ovs_bridge; OVN's controller or the OVS "
                "agent creates it)")
        if self._datapath != kind:
            LOG.info("integration bridge %s: datapath_type %s", self.bridge,
                     kind or "system")
            self._datapath = kind
        return kind

    def wait_installed(self, container_id: str, ifname: str, port_id: str,
                       seconds: float) -> None:
        """Return once ovn-controller set ``ovn-installed`` on the pod's
        Interface (the port's flows are in), as the OVSDB connection's
        monitor sees it (no polling); else, after ``seconds``, code 11
        (never counted) naming what is missing."""
        host = self.host_ifname(container_id, ifname)
        try:
            row = self.ovsdb.wait_interface(host, ovnlocal.installed,
                                            seconds)
        except _ovsdb.OvsdbError as exc:
            raise ovsdb_error(f"wait for {host} to be installed", exc,
                              self.bridge) from exc
        if row is None:
            raise errors.PortNotActive(
                f"port {port_id} of {container_id}/{ifname} not installed "
                f"by OVN within {seconds:.1f} s (no ovn-installed on "
                f"{host}): {self.ovn.why_not_installed(host, port_id)}")

    def close(self) -> None:
        """Drop this process's OVSDB connection (reopened on next use)."""
        self.ovsdb.close()

    def _rollback(self, host: str, created: bool, ported: bool) -> None:
        """Remove what plumb made: the port, then the veth."""
        if ported:
            try:
                self.remove_port(host)
            except errors.CNIError as exc:
                LOG.error("rollback: could not remove port %s: %s", host, exc)
        if created:
            self._rollback_veth(host)

    def unplumb(self, *, container_id: str, ifname: str,
                netns: str | None) -> None:
        """Remove the pod's port and veth pair; fine when already gone."""
        host = self.host_ifname(container_id, ifname)
        self.remove_port(host)
        gone = not self._delete_host_end(
            host, f"unplumb {container_id}/{ifname}")
        LOG.debug("unplumbed %s/%s (%s%s, netns %s)", container_id, ifname,
                  host, " already gone" if gone else "", netns)
