"""The ``network_canary`` handler: a canary port per node, and the probing
shared out, on the leader only.

The nodes it serves are those whose NodeNetwork record says they plug a
canary (``canaryWanted``: a node running kuryr-supervisor with the OVS
binding) and that are Nodes (:mod:`.known`: a record named after no Node
gets no port, no spec and no place on the ring, and the port made for a
name that turns out to be no Node is swept as a gone node's): it lists the
Nodes (at start and every ``resync_interval``), lists, then watches the
records (the same loop as the judge's and the pods'), and on every tick:

1. every ``canary_resync_interval`` seconds, and at once when a record
   appears without a port or a canary that was up goes down (its port may
   have been deleted), one list of the canary ports in Neutron
   (:mod:`.canaryports`): a port made for each node without one, the
   duplicates and the ports of nodes without a record deleted;
2. each record's spec is made to say its node's canary port and its share
   of the probing (:mod:`.peers`: nodes whose record says their canary is
   up, ``canary_peers`` each, the interval growing with their count),
   written only when it differs (PUT with the record's version; a
   conflict waits for the watch's next event), at most
   :data:`WRITES_PER_TICK` a tick;
3. where the ``services`` handler runs, the canary Service's endpoints
   are the canaries that are up (:mod:`.canaryservice`), and the specs of
   the nodes on the ring name its VIP (``canaryService``).

A node learns its spec from its own record; it plugs the port into a
namespace of its own and says in its status (``canary``) once the port is
installed, which puts it on the ring. Outages (Neutron, Keystone, the
API) are waited out and never counted; readiness says so.

With ``[node_port] enabled`` (the default), the Nodes whose record says
they plug a node port (``nodePortWanted``: the OVS binding's) get one
each (:mod:`.nodeports`: their own port into the pod network, in the
nodes' security group that the pods' group admits), listed and reclaimed
in the same pass as the canaries, and written into the same specs
(:mod:`~kuryr_supervisor.netcheck.codecs.nodeportspec`, ``nodePort``).

With ``[network_health] release_on_stop`` (uninstalling the controller),
a graceful stop takes the canary and the node port out of every
record's spec (each node unplugs them) and deletes every canary and node
port of the cluster (and the nodes' security group) in
Neutron before the process ends (:meth:`NetworkCanaryHandler.finish`: the
worker waits for it).

Built by :func:`.assembly.canary` (the entry point), every collaborator
given.
"""
from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.netcheck.codecs import (
    canaryspec,
    clusterspec,
    nodeportspec,
    servicespec,
)
from kuryr_supervisor.netcheck.codecs.canaryspec import Assignment, CanaryPort
from kuryr_supervisor.netcheck.judge import peers, specrelease
from kuryr_supervisor.netcheck.judge.canaryports import CanaryPorts
from kuryr_supervisor.netcheck.judge.canaryservice import CanaryService
from kuryr_supervisor.netcheck.judge.known import KnownNodes
from kuryr_supervisor.netcheck.judge.nodeports import NodePorts
from kuryr_supervisor.netcheck.judge.records import RecordSource

LOG = logging.getLogger(__name__)

#: Spec writes made in one tick at most.
WRITES_PER_TICK = 50
#: Seconds between two lists brought forward by a change.
EARLY_LIST = 2.0

Raw = Mapping[str, Any]


def wants_canary(obj: Raw) -> bool:
    """Whether the node's status says it plugs a canary when given one."""
    return (obj.get("status") or {}).get("canaryWanted") is True


def wants_node_port(obj: Raw) -> bool:
    """Whether the node's status says it plugs a node port when given
    one."""
    return (obj.get("status") or {}).get("nodePortWanted") is True


def status_port(obj: Raw) -> str:
    """The canary port the node's status says is up ("" if none)."""
    canary = ((obj.get("status") or {}).get("canary") or {})
    value = canary.get("portId") if isinstance(canary, Mapping) else None
    return value if isinstance(value, str) else ""


class RawRecords:
    """The informer's sink: every record as listed and watched, by node."""

    def __init__(self) -> None:
        self.objs: dict[str, Raw] = {}
        self.synced = False
        self.added = False          # a record appeared since the last pass

    def replace_all(self, objs: Iterable[Raw], resource_version: str) -> None:
        fresh = {self._name(o): o for o in objs if self._name(o)}
        self.added |= bool(set(fresh) - set(self.objs))
        self.objs = fresh
        self.synced = True

    def seen(self) -> None:
        """The records that appeared were looked at."""
        self.added = False

    def upsert(self, obj: Raw) -> None:
        name = self._name(obj)
        if name:
            self.added |= name not in self.objs
            self.objs[name] = obj

    def delete(self, obj: Raw) -> None:
        self.objs.pop(self._name(obj), None)

    @staticmethod
    def _name(obj: Raw) -> str:
        return str((obj.get("metadata") or {}).get("name") or "")


class NetworkCanaryHandler:
    """See the module docstring."""

    def __init__(self, rt: Runtime, *, client: k8s.K8sClient,
                 ports: CanaryPorts, known: KnownNodes,
                 node_ports: NodePorts | None = None,
                 book: RawRecords | None = None,
                 service: CanaryService | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rt, self.conf, self.client = rt, rt.conf, client
        self.ports, self.known = ports, known
        #: The nodes' own ports (None: ``[node_port] enabled`` is off).
        self.node_ports = node_ports
        #: The canary Service (None: no ``services`` handler), its VIP.
        self.service = service
        self.vip: servicespec.ServiceTarget | None = None
        self.vip_dropped = False
        self._clock = clock
        self.book = RawRecords() if book is None else book
        #: The records' names that are Nodes, as of this tick.
        self._existing: set[str] = set()
        self._nodes_listed_at: float | None = None
        self._beat = rt.beat
        self._listed_at: float | None = None
        self._retry_at = 0.0
        self._up: set[str] = set()
        self._said = ""
        self.writes = 0

    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        with self.rt.running(beat):
            self.rt.informer(RecordSource(self.client, beat=self._beat),
                             self.book, heartbeat=self.tick,
                             what="NodeNetwork").run(stopping)
            if self.conf.network_health.release_on_stop:
                self.release_all()

    def finish(self, timeout: float) -> None:
        """SIGTERM (``stopping`` already set): wait for :meth:`run` to end,
        its release included, for at most ``timeout`` seconds."""
        self.rt.finish(timeout, "canary handler")

    def tick(self) -> None:
        """Heartbeat; a Neutron pass when due; the specs that differ."""
        self._beat()
        if not self.book.synced:
            return
        now = self._clock()
        if not self._exist(now):
            return
        if now >= self._retry_at and self._list_due(now):
            self._listed_at = now
            self.book.seen()
            if not self._guarded(lambda: self.ports.reconcile(
                    self.nodes()), "canary ports"):
                self._retry_at = now + EARLY_LIST
            node_ports = self.node_ports
            if node_ports is not None and not self._guarded(
                    lambda: node_ports.reconcile(self.port_nodes()),
                    "node ports"):
                self._retry_at = now + EARLY_LIST
            if self.service is not None:
                self.service.refresh()
        service = self.service
        if service is not None:
            self._guarded(lambda: self.sync_service(service),
                          "canary Service")
        self._guarded(self.write, "canary specs")

    def sync_service(self, service: CanaryService) -> None:
        """The canary Service's endpoints: the canaries that are up, but
        those of nodes the judge holds faulty (its verdict in their
        record), as a NotReady pod leaves its Services: a dead backend
        would fail the other nodes' probes."""
        ports = self.ports.ports
        self.vip = service.sync({
            node: ipaddress.IPv4Address(ports[node].ip)
            for node in self.up() if ports[node].ip and
            not _judged_faulty(self.book.objs.get(node) or {})})

    def _exist(self, now: float) -> bool:
        """Which records are of Nodes: the Nodes listed at first and every
        ``resync_interval``, an unknown name looked up (:mod:`.known`);
        False until the first list has answered."""
        every = float(self.conf.network_health.resync_interval)
        if self._nodes_listed_at is None or \
                now - self._nodes_listed_at >= every:
            known = self.known
            if self._guarded(lambda: known.load(self._beat), "Node list"):
                self._nodes_listed_at = now
            elif self._nodes_listed_at is None:
                return False
        self._existing = self.known.existing(self.book.objs)
        return True

    def _list_due(self, now: float) -> bool:
        opts = self.conf.network_health
        if self._listed_at is None:
            return True
        since = now - self._listed_at
        gone = self._up - self.up()
        early = self.book.added or bool(gone) or \
            bool(self.nodes() - set(self.ports.ports)) or (
                self.node_ports is not None and
                bool(self.port_nodes() - set(self.node_ports.ports)))
        return since >= float(opts.canary_resync_interval) or (
            early and since >= EARLY_LIST)

    def _guarded(self, step: Callable[[], object], what: str) -> bool:
        """Run ``step``; an outage is said once and waited out."""
        try:
            step()
        except (osa.OpenStackError, k8s.K8sError) as exc:
            if self._said != what:
                LOG.warning("%s postponed: %s", what, exc)
                self._said = what
            return False
        except Exception:  # noqa: BLE001 - counted, the loop goes on
            LOG.exception("%s failed", what)
            self.rt.failed()
            return False
        if self._said == what:
            LOG.info("%s done again", what)
            self._said = ""
        self.rt.succeeded()
        return True

    def nodes(self) -> set[str]:
        """The Nodes with a record that want a canary."""
        return {node for node, obj in self.book.objs.items()
                if node in self._existing and wants_canary(obj)}

    def port_nodes(self) -> set[str]:
        """The Nodes with a record that want a node port."""
        return {node for node, obj in self.book.objs.items()
                if node in self._existing and wants_node_port(obj)}

    def up(self) -> set[str]:
        """Nodes whose record says their canary (the port made for them)
        is up."""
        return {node for node, obj in self.book.objs.items()
                if node in self._existing and node in self.ports.ports and
                status_port(obj) == self.ports.ports[node].id}

    def wanted(self) -> dict[str, Assignment]:
        """Every node's spec as it should be."""
        opts = self.conf.network_health
        ports: dict[str, CanaryPort] = {}
        mine = sorted(self._existing & self.book.objs.keys())
        for node in mine:
            port = self.ports.canary(node)
            if port is not None:
                ports[node] = port
        up = self.up()
        self._up = up
        return peers.assign(mine, ports, up,
                            k=int(opts.canary_peers),
                            base=float(opts.probe_interval),
                            rate=float(opts.probe_rate))

    def write(self) -> None:
        """Write the specs that differ from :meth:`wanted` (see the
        module)."""
        made = 0
        for node, want in sorted(self.wanted().items()):
            obj = self.book.objs.get(node)
            if obj is None or made >= WRITES_PER_TICK:
                continue
            own = self._node_port(node)
            vip = self.vip if want.interval and not self.vip_dropped \
                else None
            if self._holds(obj, node, want, own) and \
                    _vip_holds(obj, node, vip):
                continue
            body = dict(obj)
            body["spec"] = canaryspec.merged(obj.get("spec"), node, want)
            if self.node_ports is not None:
                body["spec"] = nodeportspec.merged(body["spec"], node, own)
            body["spec"] = servicespec.merged(body["spec"], node, vip)
            try:
                self.book.objs[node] = self.client.nodenetworks.replace(
                    node, body)
            except k8s.K8sPermanent as exc:
                if exc.status not in (404, 409):
                    raise
                continue       # changed or gone meanwhile: the watch says
            made += 1
            self.writes += 1
            self._beat()
            self._dropped(self.book.objs[node], vip)
        if made:
            LOG.debug("wrote %d canary specs", made)

    def _dropped(self, written: Raw, vip: object) -> None:
        """A VIP the API server dropped from a spec (a NodeNetwork CRD
        from before ``canaryService``, which prunes it) is not written
        again until a restart: said once, never a write per tick."""
        if vip is not None and servicespec.KEY not in (
                written.get("spec") or {}):
            self.vip_dropped = True
            LOG.warning("the API server drops spec.%s from NodeNetwork "
                        "records: apply the NodeNetwork CRD of this "
                        "release, then restart the controller; the service "
                        "path is not checked meanwhile", servicespec.KEY)

    def _node_port(self, node: str) -> nodeportspec.NodePort | None:
        """What ``node``'s spec should say of its node port."""
        if self.node_ports is None or node not in self.port_nodes():
            return None
        return self.node_ports.assigned(node)

    def _holds(self, obj: Raw, node: str, want: Assignment,
               own: nodeportspec.NodePort | None) -> bool:
        """Whether ``obj``'s spec says ``want`` and, with node ports,
        ``own`` already."""
        try:
            if canaryspec.assignment(obj, node) != want:
                return False
            return self.node_ports is None or \
                nodeportspec.node_port(obj, node) == own
        except ValueError:
            return False

    # -- uninstalling ------------------------------------------------------------
    def release_all(self) -> None:
        """Every record's canary part taken out (the nodes unplug their
        canaries), then every canary port of the cluster deleted (see the
        module); an outage is said, never raised."""
        if self.service is not None:
            try:
                self.service.release()
            except k8s.K8sError as exc:
                LOG.warning("cannot delete the canary Service: %s", exc)
        try:
            written, cleared = specrelease.release(
                self.client,
                canaryspec.KEYS + nodeportspec.KEYS + servicespec.KEYS,
                beat=self._beat)
        except k8s.K8sError as exc:
            LOG.warning("cannot take the canaries out of the records: %s",
                        exc)
            written, cleared = 0, False
        try:
            deleted = self.ports.reconcile(())
            if self.node_ports is not None:
                deleted += self.node_ports.release()
        except (osa.OpenStackError, k8s.K8sError) as exc:
            LOG.warning("cannot delete the canary and node ports: %s", exc)
            return
        LOG.info("released the canaries: %d ports deleted, %d records "
                 "written%s", deleted, written,
                 "" if cleared else " (some still name one)")


def _vip_holds(obj: Raw, node: str,
               vip: servicespec.ServiceTarget | None) -> bool:
    """Whether ``obj``'s spec names ``vip`` (the canary Service's) already."""
    try:
        return servicespec.target(obj, node) == vip
    except ValueError:
        return False


def _judged_faulty(obj: Raw) -> bool:
    """Whether ``obj``'s spec carries the judge's verdict on its node."""
    cluster = (obj.get("spec") or {}).get(clusterspec.KEY)
    return isinstance(cluster, Mapping) and bool(cluster.get("node"))
