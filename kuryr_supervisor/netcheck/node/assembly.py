"""The node's side of network health, assembled once: the composition root
the CNI role hands its HealthManager (``node_network=build``).

Built in the HealthManager after the fork, :class:`NodeNetwork` makes each
shared piece once and passes it to whoever uses it, in constructors:

* the node's OVSDB connection (:func:`~kuryr_supervisor.health.checks.
  ovsdb.connection`, the OVS binding), held by the data-plane checks
  (``ovsdb``, ``ovn-controller``, ``flows``, ``datapath``) and by the
  canary's plug, which therefore never opens a second one nor looks a
  check up to borrow its connection;
* the node's own port into the pod network (:mod:`.nodeport`, the OVS
  binding, ``[node_port] enabled``), over the same connection;
* the judge's word on this node (:class:`~.clusterview.ClusterView`, the
  record on: ``[network_health] record`` in Kubernetes mode), read by the
  ``network-verdict`` check and by STATUS's hold, fed by the record's
  watch.

:meth:`NodeNetwork.checks` gives the checks (before the monitor exists),
:meth:`NodeNetwork.start` the loops beside it (once it has its first
snapshot). With the Linux bridge binding the data plane is one
``bridge`` check and there is no canary.
"""
from __future__ import annotations

import logging

from oslo_config import cfg

from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.health.checks.base import Check
from kuryr_supervisor.health.checks.bridge import BridgeCheck
from kuryr_supervisor.health.checks.ovn import ovs_checks
from kuryr_supervisor.health.checks.ovsdb import connection
from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.kubernetes import config
from kuryr_supervisor.netcheck.node import netwatch
from kuryr_supervisor.netcheck.node.canary import agent
from kuryr_supervisor.netcheck.node.canary.agent import CanaryAgent
from kuryr_supervisor.netcheck.node.clusterview import ClusterView
from kuryr_supervisor.netcheck.node.nodeport import agent as nodeport
from kuryr_supervisor.netcheck.node.nodeport.agent import NodePortAgent
from kuryr_supervisor.netcheck.node.verdict import VerdictCheck
from kuryr_supervisor.state import SharedState

LOG = logging.getLogger(__name__)


class NodeNetwork:
    """See the module. ``db``: the node's OVSDB connection (None: the
    Linux bridge binding); ``view``: the judge's word on the node (None:
    no record, no judge heard, STATUS says what the checks say)."""

    def __init__(self, conf: cfg.ConfigOpts, *, db: ovsdb.Ovsdb | None,
                 view: ClusterView | None, master_pid: int) -> None:
        self.conf, self.db, self.view = conf, db, view
        self._master_pid = master_pid

    def checks(self) -> list[Check]:
        """The data-plane checks over the held connection, and
        ``network-verdict`` when a judge is heard."""
        checks: list[Check] = ovs_checks(self.conf, self.db) \
            if self.db is not None else [BridgeCheck(self.conf.binding.bridge)]
        if self.view is not None:
            checks.append(VerdictCheck(self.view))
        return checks

    def canary(self) -> CanaryAgent | None:
        """The node's canary (the OVS binding, ``[network_health]
        canary``) over the held connection; None when it cannot be had
        (said once: the rest goes on without it)."""
        if self.db is None or not self.conf.network_health.canary:
            return None
        try:
            return agent.from_conf(self.conf, config.node_name(self.conf),
                                   self.db)
        except OSError as exc:
            LOG.warning("no canary on this node: %s", exc)
            return None

    def node_port(self) -> NodePortAgent | None:
        """The node port's agent (the OVS binding, ``[node_port]
        enabled``) over the held connection; None otherwise."""
        if self.db is None or not self.conf.node_port.enabled:
            return None
        return nodeport.from_conf(self.conf, config.node_name(self.conf),
                                  self.db)

    def start(self, monitor: HealthMonitor,
              state: SharedState) -> netwatch.NetworkWatch:
        """The STATUS flags started, and with the record its writer, its
        watch, the canary and the node port (:func:`~.netwatch.
        from_conf`)."""
        canary = self.canary() if self.view is not None else None
        node_port = self.node_port() if self.view is not None else None
        return netwatch.from_conf(monitor, state, self.conf, self.view,
                                  canary=canary, node_port=node_port,
                                  master_pid=self._master_pid)


def cluster_view(conf: cfg.ConfigOpts) -> ClusterView | None:
    """The judge's word on this node with the record (Kubernetes mode,
    ``[network_health] record``); None otherwise."""
    if not conf.network_health.record or not config.is_configured(conf):
        return None
    return ClusterView(config.node_name(conf))


def build(conf: cfg.ConfigOpts, master_pid: int) -> NodeNetwork:
    """The CNI role's node side, from the options (after the fork: the
    connection is opened at its first call, in this process)."""
    db = connection(conf) if conf.binding.driver == "ovs" else None
    return NodeNetwork(conf, db=db, view=cluster_view(conf),
                       master_pid=master_pid)
