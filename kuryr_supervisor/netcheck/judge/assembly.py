"""The build functions (entry points) of the ``network_health`` handler
(the judge, :func:`judge`) and of the ``network_canary`` handler
(:func:`canary`).

Every collaborator is built here, once the process's clients exist
(:class:`~kuryr_supervisor.controller.runtime.Runtime`), and passed to a
constructor: nothing is wired after construction.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kuryr_supervisor.controller.leadership.election import identity
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.kubernetes import events
from kuryr_supervisor.netcheck.judge import canaryservice
from kuryr_supervisor.netcheck.judge.canary import NetworkCanaryHandler
from kuryr_supervisor.netcheck.judge.canaryports import CanaryPorts
from kuryr_supervisor.netcheck.judge.handler import NetworkHealthHandler
from kuryr_supervisor.netcheck.judge.known import KnownNodes
from kuryr_supervisor.netcheck.judge.nodegroups import NodeGroups
from kuryr_supervisor.netcheck.judge.nodeports import NodePorts
from kuryr_supervisor.netcheck.judge.nodes import NodeConditions
from kuryr_supervisor.netcheck.judge.records import RecordBook
from kuryr_supervisor.netcheck.judge.report import Report
from kuryr_supervisor.netcheck.judge.verdictspecs import VerdictSpecs

Clock = Callable[[], float]


def judge(rt: Runtime, *, clock: Clock = time.monotonic,
          wall: Clock = time.time) -> NetworkHealthHandler:
    """The network judge of ``rt``'s process; ``clock`` (monotonic) and
    ``wall`` are the judge's (a test's)."""
    conf = rt.conf
    client = rt.kubernetes()
    book = RecordBook(clock)
    recorder = events.recorder(client)
    return NetworkHealthHandler(
        rt, client=client, book=book,
        nodes=NodeConditions(client, conf.network_health.condition_type,
                             wall=wall, clock=clock),
        known=KnownNodes(client, clock=clock),
        specs=VerdictSpecs(
            client, book, judge=identity(rt.ctx.master_pid),
            lifetime=lambda: float(conf.network_health.verdict_lifetime),
            wall=wall, beat=rt.beat),
        recorder=recorder,
        report=Report(recorder.record, getattr(rt.ctx.state, "verdicts", None),
                      conf.controller.lease_namespace, wall=wall),
        clock=clock, wall=wall)


def canary(rt: Runtime, *,
           clock: Clock = time.monotonic) -> NetworkCanaryHandler:
    """The canary handler of ``rt``'s process, with the node ports
    (``[node_port] enabled``); ``clock``: a test's."""
    opts = rt.conf.controller
    client = rt.kubernetes()
    cloud = rt.openstack()
    where: dict[str, Any] = {
        "network_id": opts.pod_network_id, "subnet_id": opts.pod_subnet_id,
        "project_id": str(opts.project_id), "cluster_id": opts.cluster_id,
        "beat": rt.beat}
    # The service range goes to the nodes only where the services handler
    # gives ClusterIPs load balancers on that subnet.
    service_subnet = rt.conf.services.service_subnet_id \
        if canaryservice.wanted(rt.conf) else ""
    node_ports = NodePorts(cloud, client, groups=NodeGroups(
        cloud, beat=rt.beat), service_subnet_id=service_subnet,
        **where) if rt.conf.node_port.enabled else None
    return NetworkCanaryHandler(
        rt, client=client, ports=CanaryPorts(cloud, client, **where),
        node_ports=node_ports, known=KnownNodes(client, clock=clock),
        service=canaryservice.build(rt.conf, client, rt.beat),
        clock=clock)
