"""The manifests as shipped run pods on the two-node OVN stack.

The controller's Deployment and the DaemonSet with the ``ovs`` component,
rendered by kustomize and run as their containers say, with nothing
changed but the cloud's address and credentials and the host paths a test
cannot give (tests/fixtures/ovn/manifests.py lists every change): 20 pods,
10 per node, ADDed at once through the shim and conflist the daemons
installed get no CNI error; their ports are ACTIVE on their nodes; and
pods on different nodes exchange full-size packets over Geneve (a TCP
transfer: a pod MTU above the network's would lose every full segment).
"""
from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.netns import ip_json
from tests.fixtures.ovn.fabric import tcp_transfer
from tests.fixtures.ovn.manifests import ManifestCluster
from tests.fixtures.ovn.stack import OvnStack
from tests.functional.cni_harness import Namespaces

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]


@pytest.fixture
def shipped(ovn_stack: OvnStack, tmp_path: Path,
            namespaces: Namespaces) -> Iterator[ManifestCluster]:
    with ovn_stack.in_catalog():
        cluster = ManifestCluster(ovn_stack, tmp_path,
                                  namespaces.create).start()
        try:
            yield cluster
        finally:
            cluster.close()


def test_twenty_pods_as_shipped(ovn_stack: OvnStack,
                                shipped: ManifestCluster) -> None:
    nodes = ovn_stack.fabric.nodes
    tag = uuid.uuid4().hex[:6]
    names = [f"p{i}-{tag}" for i in range(20)]
    for i, name in enumerate(names):
        shipped.create(name, nodes[i % 2])
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        answers = dict(zip(names, pool.map(
            lambda n: shipped.cni("ADD", n), names), strict=True))
    failed = {n: a for n, a in answers.items() if a[0] != 0}
    assert not failed, (failed, {n: d.log() for n, d in
                                 shipped.daemons.items()})
    pods = {n: shipped.plugged(n, answers[n][1]) for n in names}
    for name, pod in pods.items():
        port = ovn_stack.wait_port(pod.port_id, "ACTIVE", 10)
        assert port["binding:host_id"] == pod.node.name, name

    # The pods' MTU fits the network's, so full-size segments cross nodes.
    src, dst = pods[names[0]], pods[names[1]]
    for pod in (src, dst):
        [link] = ip_json("link", "show", "eth0", netns=pod.netns)
        assert link["mtu"] <= ovn_stack.mtu, (link["mtu"], ovn_stack.mtu)
    assert src.node is not dst.node
    ovn_stack.fabric.wait_ping(src, dst)
    transfer = tcp_transfer(src, dst, 5_000_000, timeout=20)
    assert transfer.received_digest == transfer.sent_digest, transfer

    for name in names:
        code, out = shipped.cni("DEL", name)
        assert code == 0, out
