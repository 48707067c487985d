"""Who is to blame for a canary that cannot reach the canary Service's VIP.

Each node whose canary is up reaches the canary Service's VIP each round
(:mod:`kuryr_supervisor.netcheck.codecs.servicespec`) and writes whether it
did in its record (``service``). The Service's load balancer is applied
on the client's own node (OVN's load balancers are flows ovn-controller
installs there), so one node that cannot reach it while the others do has
lost those flows, or its path to them: its own fault
(``KuryrServicePathBroken``). When most nodes cannot, the load balancer
itself is broken or gone (Octavia, its OVN provider, the Northbound
database): nobody's fault, counted as trouble of kind ``services`` for
the cluster-wide judgement, never blamed on one node.

A failed probe is blamed on its node only when, among the other nodes
that probed the same address, more reached it than not and at least one
did (as a third witness; with two nodes, the other one is the witness).
Nodes that say their own data plane is broken (a local check, their
daemon) explain their own failure and witness nothing. A node that has
probed no VIP (no canary Service, its canary not up yet, an older
daemon) says nothing either way.

Pure: the reports in, the blame out.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from kuryr_supervisor.netcheck.codecs.record import NetworkReport

#: The judge's reason for a node that alone cannot reach the VIP.
REASON = "KuryrServicePathBroken"
#: The kind of trouble of a node that cannot reach it with the others.
KIND = "services"


@dataclasses.dataclass(frozen=True)
class ServiceBlame:
    """The outcome for one node whose VIP probe failed."""

    address: str
    local: bool             # blamed on the node (else: trouble only)
    reached_by: int         # other nodes that reached the same address
    failed_by: int          # other nodes that did not


def attribute(reports: Mapping[str, NetworkReport],
              self_faulty: Collection[str] = ()) -> dict[str, ServiceBlame]:
    """For each node of ``reports`` whose VIP probe failed and that does
    not explain it itself, whether it is its fault (see the module)."""
    probes = {node: r.service for node, r in reports.items()
              if r.service is not None and node not in self_faulty}
    out = {}
    for node, probe in probes.items():
        if probe.reached:
            continue
        others = [p.reached for n, p in probes.items()
                  if n != node and p.address == probe.address]
        reached, failed = others.count(True), others.count(False)
        out[node] = ServiceBlame(probe.address, reached >= 1 and
                                 reached > failed, reached, failed)
    return out
