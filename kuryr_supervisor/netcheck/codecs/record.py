"""The NodeNetwork record: what a node says of its data plane.

One record per node, named after it and owned by its Node (the garbage
collector deletes it with the Node); the resource's name, which the
client serves and the write fence covers, is
:mod:`kuryr_supervisor.kubernetes.nodenetwork`'s. The node's daemon writes it
(its HealthManager, on change and on a slow heartbeat); the controller's
``network_health`` handler reads every node's to judge whether a node's
network is broken while the rest of the cluster is fine.

The spec says only whose record it is (``nodeName``); everything the node
observed is in the status subresource, replaced whole on each write::

    status:
      heartbeatTime: "2024-05-01T10:00:00Z"   # the node's clock, for people
      heartbeatSeconds: 60                    # the next write comes by then
      daemon: {ready: true, since: "...", summary: "live, ready"}
      checks:                                 # local data-plane checks
        - {name: ovsdb, ok: true, message: "OVSDB answers, br-int present"}
      gateway: {address: 10.0.0.1, reached: true, latencyMs: 0.4}
      peers:                                  # a bounded sample
        - {node: node-b, address: 10.0.0.7, reached: true, latencyMs: 0.9}
      canary: {address: 10.0.0.5, portId: "<neutron port id>"}
      service: {address: 10.43.0.10, reached: true, latencyMs: 1.2}
      canaryWanted: true                      # plugs a canary when given one
      nodePortWanted: true                    # plugs a node port when given one
      lostPorts:                              # pods whose port is lost
        count: 1                              # all of them
        pods:                                 # the first 64
          - {namespace: default, name: web-1, portId: "<port id>", why: "..."}

The spec names the node; the controller writes the rest of it (the
canary port it made for the node, whom the node probes:
:mod:`.canaryspec`).

A record comes from a node, so the controller trusts it no more than a
node: :func:`from_object` checks every field's type and bounds (at most
:data:`MAX_PEERS` peers and :data:`MAX_CHECKS` checks, strings cut to
:data:`MAX_TEXT`) and refuses a record whose spec names another node.

``lostPorts`` lists the node's pods whose Neutron port was made again
and whose interface the node cannot point at it
(:mod:`~kuryr_supervisor.kubernetes.podportfollow`): each such pod has
no network, but that is the pod's fault to mend (delete it), not the
node's data plane's. A change of its count is a change that is written
at once; the judge does not read it, and a record without it (an older
node's) reads as none lost.
"""
from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kuryr_supervisor.kubernetes.nodenetwork import API_VERSION, KIND
from kuryr_supervisor.state.lostports import LostPorts

MAX_PEERS = 64
MAX_CHECKS = 16
MAX_TEXT = 256
#: An address or a port id (the CRD's bound).
MAX_ID = 64
#: A Kubernetes object name (DNS subdomain).
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_CHECK = re.compile(r"^[a-z0-9][-a-z0-9]{0,62}$")


@dataclasses.dataclass(frozen=True)
class LocalCheck:
    """One local data-plane check (ovn-controller, flows, datapath, ovsdb)."""

    name: str
    ok: bool
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Probe:
    """One probe from the node's canary: of its gateway (``node`` empty)
    or of a peer node's canary."""

    node: str
    address: str
    reached: bool
    latency_ms: float | None = None


@dataclasses.dataclass(frozen=True)
class Canary:
    """The node's canary: the address and Neutron port it probes from."""

    address: str
    port_id: str


@dataclasses.dataclass(frozen=True)
class Daemon:
    ready: bool
    since: float            # epoch seconds of the last change of ``ready``
    summary: str = ""


@dataclasses.dataclass(frozen=True)
class NetworkReport:
    """What a node says of its data plane at one instant (the record's
    status without its heartbeat)."""

    daemon: Daemon
    checks: tuple[LocalCheck, ...] = ()
    gateway: Probe | None = None
    peers: tuple[Probe, ...] = ()
    canary: Canary | None = None
    #: The node plugs a canary when given one (the controller makes its
    #: port only then).
    canary_wanted: bool = False
    #: This node's pods whose port is lost (never a data-plane fault).
    lost: LostPorts = LostPorts()
    #: Its canary's probe of the canary Service's VIP (``node`` empty;
    #: None: no VIP given, or no round yet).
    service: Probe | None = None
    #: The node plugs its own port into the pod network when given one
    #: (the controller makes it only then).
    node_port_wanted: bool = False

    def signature(self) -> tuple[Any, ...]:
        """What a change is: the verdicts, never the messages or the
        latencies (figures that move on every probe would make every
        look a write; they ride along with the next one)."""
        return (self.daemon.ready,
                tuple((c.name, c.ok) for c in self.checks),
                None if self.gateway is None else (self.gateway.address,
                                                   self.gateway.reached),
                tuple((p.node, p.reached) for p in self.peers),
                self.canary, self.canary_wanted, self.lost.count,
                None if self.service is None else (self.service.address,
                                                   self.service.reached),
                self.node_port_wanted)


@dataclasses.dataclass(frozen=True)
class Record:
    """A node's record as the controller reads it."""

    node: str
    report: NetworkReport
    heartbeat_seconds: float
    resource_version: str = ""


def rfc3339(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def epoch(text: Any) -> float:
    """RFC 3339 (as :func:`rfc3339` writes it) to epoch seconds; 0 when
    it is not one."""
    try:
        return datetime.datetime.strptime(
            str(text), "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return 0.0


def body(node: str, node_uid: str) -> dict[str, Any]:
    """A new record for ``node``, owned by its Node (UID ``node_uid``)."""
    meta: dict[str, Any] = {"name": node}
    if node_uid:
        meta["ownerReferences"] = [{
            "apiVersion": "v1", "kind": "Node", "name": node,
            "uid": node_uid, "blockOwnerDeletion": False}]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
            "spec": {"nodeName": node}}


def _latency(value: float | None) -> dict[str, float]:
    return {} if value is None else {"latencyMs": round(float(value), 3)}


def status(report: NetworkReport, *, heartbeat_seconds: float,
           wall: float) -> dict[str, Any]:
    """The status subresource for ``report``, as of ``wall``."""
    out: dict[str, Any] = {
        "heartbeatTime": rfc3339(wall),
        "heartbeatSeconds": int(heartbeat_seconds),
        "daemon": {"ready": report.daemon.ready,
                   "since": rfc3339(report.daemon.since),
                   "summary": report.daemon.summary[:MAX_TEXT]},
        "checks": [{"name": c.name, "ok": c.ok, "message": c.message[:MAX_TEXT]}
                   for c in report.checks[:MAX_CHECKS]],
        "peers": [{"node": p.node, "address": p.address[:MAX_ID],
                   "reached": p.reached, **_latency(p.latency_ms)}
                  for p in report.peers[:MAX_PEERS]],
    }
    if report.gateway is not None:
        out["gateway"] = {"address": report.gateway.address[:MAX_ID],
                          "reached": report.gateway.reached,
                          **_latency(report.gateway.latency_ms)}
    if report.canary is not None:
        out["canary"] = {"address": report.canary.address[:MAX_ID],
                         "portId": report.canary.port_id[:MAX_ID]}
    if report.service is not None:
        out["service"] = {"address": report.service.address[:MAX_ID],
                          "reached": report.service.reached,
                          **_latency(report.service.latency_ms)}
    if report.canary_wanted:
        out["canaryWanted"] = True
    if report.node_port_wanted:
        out["nodePortWanted"] = True
    out["lostPorts"] = report.lost.document()
    return out


# -- reading (what a node wrote is checked before it is believed) -------------
def _map(raw: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} is not an object")
    return raw


def _list(raw: Any, what: str, most: int) -> Sequence[Any]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{what} is not a list")
    if len(raw) > most:
        raise ValueError(f"{what} has more than {most} items")
    return raw


def _bool(raw: Mapping[str, Any], key: str, what: str) -> bool:
    value = raw.get(key)
    if not isinstance(value, bool):
        raise ValueError(f"{what}.{key} is not a boolean")
    return value


def _text(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key, "")
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _probe(raw: Any, what: str, *, peer: bool) -> Probe:
    item = _map(raw, what)
    node = item.get("node", "") if peer else ""
    if peer and (not isinstance(node, str) or not _NAME.match(node)):
        raise ValueError(f"{what}.node is not a node name")
    latency = item.get("latencyMs")
    if latency is not None and (isinstance(latency, bool) or
                                not isinstance(latency, (int, float))):
        raise ValueError(f"{what}.latencyMs is not a number")
    return Probe(node, _text(item, "address"), _bool(item, "reached", what),
                 None if latency is None else float(latency))


def _check(raw: Any, what: str) -> LocalCheck:
    item = _map(raw, what)
    name = item.get("name")
    if not isinstance(name, str) or not _CHECK.match(name):
        raise ValueError(f"{what}.name is not a check name")
    return LocalCheck(name, _bool(item, "ok", what), _text(item, "message"))


def from_object(obj: Mapping[str, Any]) -> Record:
    """Validate a NodeNetwork; ValueError says what is wrong."""
    meta = _map(obj.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError("metadata.name is not a node name")
    spec = _map(obj.get("spec"), "spec")
    if spec.get("nodeName") != name:
        raise ValueError("spec.nodeName is not the record's name")
    st = _map(obj.get("status"), "status")
    beat = st.get("heartbeatSeconds")
    if isinstance(beat, bool) or not isinstance(beat, int) or \
            not 1 <= beat <= 3600:
        raise ValueError("status.heartbeatSeconds is not 1-3600")
    daemon = _map(st.get("daemon"), "status.daemon")
    checks = tuple(_check(c, f"status.checks[{i}]") for i, c in enumerate(
        _list(st.get("checks"), "status.checks", MAX_CHECKS)))
    peers = tuple(_probe(p, f"status.peers[{i}]", peer=True) for i, p in
                  enumerate(_list(st.get("peers"), "status.peers",
                                  MAX_PEERS)))
    gateway = None if st.get("gateway") is None else _probe(
        st["gateway"], "status.gateway", peer=False)
    service = None if st.get("service") is None else _probe(
        st["service"], "status.service", peer=False)
    canary = None
    if st.get("canary") is not None:
        raw = _map(st["canary"], "status.canary")
        canary = Canary(_text(raw, "address"), _text(raw, "portId"))
    wanted = st.get("canaryWanted", False)
    if not isinstance(wanted, bool):
        raise ValueError("status.canaryWanted is not a boolean")
    node_port = st.get("nodePortWanted", False)
    if not isinstance(node_port, bool):
        raise ValueError("status.nodePortWanted is not a boolean")
    report = NetworkReport(
        Daemon(_bool(daemon, "ready", "status.daemon"),
               epoch(daemon.get("since")), _text(daemon, "summary")),
        checks, gateway, peers, canary, wanted,
        LostPorts.parse(st.get("lostPorts"), "status.lostPorts"), service,
        node_port)
    return Record(name, report, float(beat),
                  str(meta.get("resourceVersion") or ""))
