"""The canary plugged as a pod is: the node's OVS binding puts its port's
veth into the canary's namespace and on the integration bridge.

The same plumbing as a pod's ADD (:class:`~kuryr_supervisor.cni.binding.
OvsBinding`: the veth, the Interface's ``iface-id`` naming the Neutron
port, its MAC, address and default route through the subnet's gateway),
under a (container id, ifname) of its own
(:data:`~kuryr_supervisor.cni.binding.base.CANARY`) whose host end GC
spares; so the canary's packets take the logical path a pod's take, and
ovn-controller installs its flows as for a pod (``ovn-installed``).

A port already on the bridge under the canary's name (left by an earlier
HealthManager, whose namespace died with it) is removed before the first
plug, so nothing stale (``ovn-installed``) is believed.
"""
from __future__ import annotations

import logging

from kuryr_supervisor.cni.binding import OvsBinding
from kuryr_supervisor.cni.binding.base import CANARY
from kuryr_supervisor.cni.ovsdb import ovnlocal
from kuryr_supervisor.netcheck.codecs.canaryspec import CanaryPort
from kuryr_supervisor.netcheck.node.canary.netns import OwnNetns

LOG = logging.getLogger(__name__)


class CanaryPlug:
    """Plugs one canary port at a time into ``netns``; ``owner`` is put
    in the Interface's ``vm-uuid`` (the node's name)."""

    def __init__(self, binding: OvsBinding, netns: OwnNetns,
                 owner: str) -> None:
        self.binding, self.netns, self.owner = binding, netns, owner
        self.host = binding.host_ifname(*CANARY)
        self.port: CanaryPort | None = None
        self._fresh = True

    def plug(self, port: CanaryPort) -> None:
        """``port`` plugged (the one plugged before, if another, first
        unplugged); the binding's CNIError when it cannot be."""
        if port == self.port:
            return
        if self.port is not None or self._fresh:
            self.unplug()
            self._fresh = False
        if port.gateway is None:
            raise ValueError(f"the canary's subnet ({port.address.network}) "
                             "has no gateway")
        container, ifname = CANARY
        self.binding.plumb(container_id=container, ifname=ifname,
                           netns=self.netns.path, address=port.address,
                           gateway=port.gateway, mac=port.mac,
                           iface_id=port.port_id, owner=self.owner)
        self.port = port
        LOG.info("canary plugged: port %s, %s on %s", port.port_id,
                 port.address, self.host)

    def unplug(self) -> None:
        """The canary's port off the bridge and its veth gone (fine when
        neither is there)."""
        container, ifname = CANARY
        self.binding.remove_port(self.host)
        self.binding.unplumb(container_id=container, ifname=ifname,
                             netns=None)
        if self.port is not None:
            LOG.info("canary unplugged: port %s", self.port.port_id)
        self.port = None

    def installed(self) -> bool:
        """Whether ovn-controller installed the plugged port's flows (the
        Interface's ``ovn-installed``, as the held connection's monitor
        has it)."""
        if self.port is None:
            return False
        row = self.binding.ovsdb.our_interface(self.host)
        return row is not None and ovnlocal.installed(row) and \
            (row.get("external_ids") or {}).get("iface-id") == \
            self.port.port_id

    def why_not(self) -> str:
        """What the node can tell of why the port is not installed."""
        if self.port is None:
            return "not plugged"
        return self.binding.ovn.why_not_installed(self.host,
                                                  self.port.port_id)
