"""The node's canary, kept as the controller's spec says: the node's own
record's spec, plug its canary port, aim the prober, and hand what was
found to the record, ``/status`` and ``/metrics``.

The agent is told each version of the record (:meth:`CanaryAgent.take`:
the record's watch, :mod:`kuryr_supervisor.netcheck.node.recordfollow`, the node
reading no one's record but its own) and asks nothing of the API.
:meth:`CanaryAgent.step` is one look (the loop runs it every second, off
the HealthManager's loop, beside the record writer):

1. the spec last told is the assignment (a spec that does not hold up
   is said once and the last one kept);
2. its canary port (:mod:`kuryr_supervisor.netcheck.codecs.canaryspec`) is
   plugged (:mod:`.plug`), a new one in place of the old, none unplugged;
3. once ovn-controller installed it, the prober is aimed at the gateway
   and the peers the spec names, and the canary Service's VIP where the
   spec names one (:mod:`kuryr_supervisor.netcheck.codecs.servicespec`), at
   its interval; until then (and while it is not), nothing is probed and
   nothing is reported but why.

:meth:`CanaryAgent.results` is the record's provider
(:data:`~kuryr_supervisor.netcheck.node.dataplane.Probes`): the last round's
gateway and peers, and the canary, only while it is up and the round is
of the current aim, so a canary that is down is never evidence against
anyone; the gateway only once it has answered this canary (a subnet
whose gateway is no router has none to probe); the canary Service's VIP
(:meth:`CanaryAgent.service`) only once it has answered this canary too
(its load balancer is made a moment after the Service: until then every
node would fail it at once). Every failure (OVSDB,
netlink) is said once and tried again at the next look.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.cni.binding import OvsBinding
from kuryr_supervisor.netcheck.codecs import canaryspec, servicespec
from kuryr_supervisor.netcheck.codecs.canaryspec import Assignment
from kuryr_supervisor.netcheck.codecs.record import Canary, Probe
from kuryr_supervisor.netcheck.codecs.servicespec import ServiceTarget
from kuryr_supervisor.netcheck.node.canary.netns import OwnNetns
from kuryr_supervisor.netcheck.node.canary.plug import CanaryPlug
from kuryr_supervisor.netcheck.node.canary.prober import Aim, Prober, Seen
from kuryr_supervisor.netcheck.node.canary.probes import Outcome
from kuryr_supervisor.netcheck.node.dataplane import ProbeResults

LOG = logging.getLogger(__name__)


class CanaryAgent:
    """See the module."""

    def __init__(self, node: str, plug: CanaryPlug, prober: Prober) -> None:
        self.node = node
        self.plug, self.prober = plug, prober
        self.assignment = Assignment()
        #: The canary Service's VIP the spec names (None: none).
        self.vip: ServiceTarget | None = None
        self.up = False
        self.state = "waiting for the controller to make the canary's port"
        self._said = ""
        #: (canary port, gateway) once the gateway answered that canary:
        #: a gateway that never answers (no router) is not probed for.
        self._answered: tuple[str, Any] | None = None
        #: (canary port, VIP, port) once the VIP answered that canary: a
        #: load balancer not made yet (a new canary Service) is not
        #: reported as unreachable.
        self._vip_answered: tuple[str, Any, int] | None = None
        #: CPU seconds the loop that runs :meth:`step` has spent.
        self.cpu_seconds = 0.0

    # -- the loop's body ---------------------------------------------------------
    def step(self) -> None:
        port = self.assignment.canary
        try:
            if port is None:
                if self.plug.port is not None:
                    self.plug.unplug()
                self._set(False, "waiting for the controller to make the "
                                 "canary's port")
            else:
                self.plug.plug(port)
                if self.plug.installed():
                    self._set(True, f"up: port {port.port_id}, "
                                    f"{port.address}")
                else:
                    self._set(False, f"port {port.port_id} not installed: "
                                     f"{self.plug.why_not()}")
        except (errors.CNIError, ovsdb.OvsdbError, ValueError) as exc:
            self._set(False, f"cannot plug: {exc}")
        self.prober.aim(self._aim() if self.up else Aim())
        self.cpu_seconds = time.thread_time()

    def take(self, obj: Mapping[str, Any] | None) -> None:
        """The node's record as just seen (None: there is none yet; the
        record writer makes it)."""
        if obj is None:
            return
        try:
            self.assignment = canaryspec.assignment(obj, self.node)
        except ValueError as exc:
            self._say(f"the record's spec is refused: {exc}")
            return
        try:
            self.vip = servicespec.target(obj, self.node)
        except ValueError as exc:
            self.vip = None
            self._say(f"the record's canary Service is refused: {exc}")
            return
        self._said = ""

    def _aim(self) -> Aim:
        a, port = self.assignment, self.assignment.canary
        vip = None if self.vip is None or not a.interval else (
            self.vip.address, self.vip.port)
        return Aim(port.gateway if port is not None else None,
                   tuple((t.node, t.address) for t in a.peers), a.interval,
                   vip)

    def _set(self, up: bool, state: str) -> None:
        if up != self.up or (not up and state != self.state):
            (LOG.info if up else LOG.warning)("canary %s", state)
        self.up, self.state = up, state

    def _say(self, text: str) -> None:
        if text != self._said:
            LOG.warning("canary: %s", text)
            self._said = text

    def close(self) -> None:
        """Stop probing; the canary unplugged (said, never raised), its
        namespace let go."""
        self.prober.stop()
        try:
            self.plug.unplug()
        except (errors.CNIError, ovsdb.OvsdbError) as exc:
            LOG.warning("canary: cannot unplug: %s", exc)
        self.plug.netns.close()

    # -- what it found -----------------------------------------------------------
    def results(self) -> ProbeResults:
        """(gateway, peers, canary) for the record (see the module)."""
        port = self.plug.port
        if not self.up or port is None or not self._installed():
            return None, (), None
        canary = Canary(str(port.address.ip), port.port_id)
        seen = self.prober.outcomes()
        if seen is None:
            return None, (), canary
        gateway = None
        out = self._gateway(seen)
        if out is not None:
            gateway = Probe("", str(seen.aim.gateway), out.reached,
                            out.latency_ms)
        peers = tuple(
            Probe(node, str(address), seen.outcomes[address].reached,
                  seen.outcomes[address].latency_ms)
            for node, address in seen.aim.peers if address in seen.outcomes)
        return gateway, peers, canary

    def service(self) -> Probe | None:
        """The last round's probe of the canary Service's VIP for the
        record, on the same terms as :meth:`results`, once the VIP has
        answered this canary (None: none)."""
        if not self.up or self.plug.port is None or not self._installed():
            return None
        seen = self.prober.outcomes()
        if seen is None or seen.aim.service is None or \
                seen.aim.service[0] not in seen.outcomes:
            return None
        out = seen.outcomes[seen.aim.service[0]]
        key = (self.plug.port.port_id, *seen.aim.service)
        if out.reached:
            self._vip_answered = key
        if self._vip_answered != key:
            return None
        return Probe("", str(seen.aim.service[0]), out.reached,
                     out.latency_ms)

    def _installed(self) -> bool:
        """Whether the canary is installed now (the monitor: no round
        trip), so a round that failed because its port just went is not
        handed on while the agent has not looked yet."""
        try:
            return self.plug.installed()
        except ovsdb.OvsdbError:
            return False

    def _gateway(self, seen: Seen) -> Outcome | None:
        """The gateway's outcome in ``seen``, once the gateway has
        answered the canary plugged now (see the module)."""
        port, address = self.plug.port, seen.aim.gateway
        if port is None or address is None or address not in seen.outcomes:
            return None
        out = seen.outcomes[address]
        if out.reached:
            self._answered = (port.port_id, address)
        return out if self._answered == (port.port_id, address) else None

    def status(self) -> dict[str, Any]:
        """The canary's part of ``/status``."""
        seen = self.prober.outcomes() if self.up else None
        doc: dict[str, Any] = {
            "state": self.state, "up": self.up,
            "port": self.plug.port.port_id if self.plug.port else None,
            "address": str(self.plug.port.address) if self.plug.port
            else None,
            "interval": self.assignment.interval or None,
            "icmp": self.prober.icmp, "rounds": self.prober.rounds,
            "cpuSeconds": round(self.prober.cpu_seconds + self.cpu_seconds +
                                self.prober.responder.cpu_seconds, 6),
            "gateway": None, "peers": [], "service": None}
        if seen is None:
            return doc
        if seen.aim.service is not None and \
                seen.aim.service[0] in seen.outcomes:
            doc["service"] = {
                **_probe_doc(str(seen.aim.service[0]),
                             seen.outcomes[seen.aim.service[0]]),
                "port": seen.aim.service[1]}
        gateway = self._gateway(seen)
        if gateway is not None:
            doc["gateway"] = _probe_doc(str(seen.aim.gateway), gateway)
        doc["peers"] = [dict(node=node, **_probe_doc(str(address),
                                                     seen.outcomes[address]))
                        for node, address in seen.aim.peers
                        if address in seen.outcomes]
        return doc


def _probe_doc(address: str, out: Outcome) -> Mapping[str, Any]:
    return {"address": address, "reached": out.reached, "icmp": out.icmp,
            "tcp": out.tcp, "latencyMs": None if out.latency_ms is None
            else round(out.latency_ms, 3)}


def from_conf(conf: Any, node: str, db: ovsdb.Ovsdb) -> CanaryAgent:
    """The agent of the CNI role with the OVS binding, over the
    HealthManager's held OVSDB connection ``db``; its prober started."""
    group, opts = conf.binding, conf.network_health
    binding = OvsBinding(group.ovs_bridge, group.mtu, ovsdb=db,
                         tx_checksum_off=group.ovs_tx_checksum_off,
                         ovn_rundir=group.ovn_rundir)
    netns = OwnNetns()
    prober = Prober(netns, port=lambda: int(opts.canary_tcp_port),
                    timeout=lambda: float(opts.probe_timeout)).start()
    return CanaryAgent(node, CanaryPlug(binding, netns, node), prober)
