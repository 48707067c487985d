"""The node port kept as the controller's spec says.

The agent is told each version of the node's record (:meth:`NodePortAgent.
take`, from the record's watch) and asks nothing of the API.
:meth:`NodePortAgent.step` is one look (its loop runs it every second, in
the HealthManager, beside the canary's):

1. the spec last told names the node port (:mod:`kuryr_supervisor.
   netcheck.codecs.nodeportspec`; a spec that does not hold up is said
   once and the last one kept); until a record was read nothing is done,
   so a HealthManager that starts again never unplugs a port its
   predecessor plugged;
2. a port named is plugged, every part checked and what went missing made
   again (:mod:`.plug`); a port no longer named is unplugged (and one
   left on the bridge by an earlier daemon while the spec names none).

Every failure (OVSDB, netlink, the interface not made yet) is said once
per change and tried again at the next look. :meth:`NodePortAgent.close`
leaves the port plugged: the kubelet's probes keep reaching the pods
while the daemon restarts; the spec, when the controller drops it, has it
unplugged.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.cni import netlink, ovsdb
from kuryr_supervisor.conf import node_port as node_port_conf
from kuryr_supervisor.netcheck.codecs import nodeportspec
from kuryr_supervisor.netcheck.codecs.nodeportspec import NodePort
from kuryr_supervisor.netcheck.node.nodeport.plug import NodePortPlug, NotYet

LOG = logging.getLogger(__name__)


class NodePortAgent:
    """See the module."""

    def __init__(self, node: str, plug: NodePortPlug) -> None:
        self.node, self.plug = node, plug
        #: What the spec names (None: nothing), once a record was read.
        self.wanted: NodePort | None = None
        self.known = False
        self.state = "waiting for the node's record"
        self._said = ""
        self._cleared = False

    def take(self, obj: Mapping[str, Any] | None) -> None:
        """The node's record as just seen (None: none yet)."""
        if obj is None:
            return
        try:
            self.wanted = nodeportspec.node_port(obj, self.node)
        except ValueError as exc:
            self._say(f"the record's spec is refused: {exc}")
            return
        self.known, self._said = True, ""

    def step(self) -> None:
        if not self.known:
            return
        port = self.wanted
        try:
            if port is None:
                self._unplug()
                return
            made = self.plug.plug(port)
        except NotYet as exc:
            self._set(f"port {port.port_id if port else ''}: {exc}")
            return
        except (ovsdb.OvsdbError, netlink.NetlinkError, OSError) as exc:
            self._set(f"cannot plug: {exc}")
            return
        self._cleared = False
        if made:
            LOG.info("node port %s: %s on %s (%s)", port.port_id, port.address,
                     self.plug.ifname, ", ".join(made) + " made")
        self._set(f"plugged: port {port.port_id}, {port.address} on "
                  f"{self.plug.ifname}", up=True)

    def _unplug(self) -> None:
        if self.plug.port is None and self._cleared:
            return
        had = self.plug.port
        try:
            gone = self.plug.unplug()
        except ovsdb.OvsdbError as exc:
            self._set(f"cannot unplug: {exc}")
            return
        self._cleared = True
        if had is not None or gone:
            LOG.info("node port unplugged from %s", self.plug.ifname)
        self._set("none named in the node's record", up=True)

    def _set(self, state: str, *, up: bool = False) -> None:
        if state != self.state:
            (LOG.debug if up else LOG.warning)("node port: %s", state)
        self.state = state

    def _say(self, text: str) -> None:
        if text != self._said:
            LOG.warning("node port: %s", text)
            self._said = text

    def status(self) -> dict[str, Any]:
        """What ``/status`` could say of it."""
        port = self.plug.port
        return {"state": self.state,
                "port": port.port_id if port is not None else None,
                "address": str(port.address) if port is not None else None,
                "interface": self.plug.ifname}


def from_conf(conf: Any, node: str, db: ovsdb.Ovsdb) -> NodePortAgent:
    """The agent of the CNI role with the OVS binding, over the
    HealthManager's held OVSDB connection ``db``."""
    group, opts = conf.binding, conf.node_port

    def userspace() -> bool:
        return db.datapath_type() == "netdev"

    def checksum_off() -> bool:
        if group.ovs_tx_checksum_off in ("true", "false"):
            return bool(group.ovs_tx_checksum_off == "true")
        return userspace()
    return NodePortAgent(node, NodePortPlug(
        db, bridge=group.ovs_bridge, ifname=opts.ifname, mtu=group.mtu,
        owner=node, service_cidr=node_port_conf.service_cidr(
            opts.service_cidr), checksum_off=checksum_off,
        userspace=userspace))
