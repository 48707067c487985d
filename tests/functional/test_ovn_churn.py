"""A healthy node raises no alarm while its pods come and go, on the real
OVN stack (tests/fixtures/ovn/): our daemon with the OVS binding, the
controller with the port handler against the ML2/OVN Neutron.

Pods ADDed and DELeted on one node, four pairs at a time, beside pods
that stay (:func:`tests.fixtures.ovn.churn.churn`), while CNI STATUS is
asked through the shim, as a runtime calls it, and the node's readiness
read, five times a second each (:class:`tests.fixtures.ovn.churn.Watch`):
no STATUS call fails and readiness never turns. A DEL takes the port off
``br-int`` and ovn-controller removes its flows at once, before or after
the health checks' view of the database has the port gone; an ADD's port
gets its ofport before its flows: neither is a port that lost its flows.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.ovn.churn import Watch, churn
from tests.fixtures.ovn.cni import Cluster
from tests.fixtures.ovn.health import ready, status
from tests.fixtures.ovn.stack import OvnStack, wait_for
from tests.functional.cni_harness import Namespaces

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

#: ADD/DEL pairs, and how many at a time.
PAIRS, AT_ONCE = 40, 4


@pytest.fixture
def cluster(ovn_stack: OvnStack, tmp_path: Path,
            namespaces: Namespaces) -> Iterator[Cluster]:
    with ovn_stack.in_catalog():
        cluster = Cluster(ovn_stack, tmp_path, namespaces.create)
        try:
            yield cluster.start()
        finally:
            cluster.close()


def test_no_alarm_while_pods_come_and_go(ovn_stack: OvnStack,
                                         cluster: Cluster) -> None:
    node = ovn_stack.fabric.nodes[0]
    tag = uuid.uuid4().hex[:6]
    # Pods that stay: the flows check has installed ports to count
    # throughout.
    for n in range(2):
        cluster.add(f"stay-{tag}-{n}", node)
    wait_for(lambda: ready(cluster, node)[0] and
             status(cluster, node)[0] == 0, 30,
             lambda: f"{node.name} ready: {ready(cluster, node)}, STATUS "
                     f"{status(cluster, node)}")
    watch = Watch(cluster, node).start()
    try:
        done = churn(cluster, node, pairs=PAIRS, at_once=AT_ONCE, tag=tag)
    finally:
        watch.stop()
    daemon = cluster.daemons[node.name]
    assert done.errors == [], done.errors
    assert done.pairs == PAIRS
    assert watch.status_calls >= 10 and watch.ready_calls >= 10
    assert not watch.failed_status and not watch.flips, watch.said()
    # The check counts the pods that stayed, each with its flows, once
    # it has run after the last DEL.
    def flows() -> str:
        return str(daemon.status()["checks"]["flows"]["message"])
    wait_for(lambda: flows() == "br-int holds the flows of all 2 ports OVN "
                                "installed", 10, flows)
    assert " ERROR " not in daemon.log_path.read_text(), daemon.log()
