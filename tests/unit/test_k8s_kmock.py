"""The adapter against a third-party Kubernetes-API-shaped server (kmock),
as a cross-check of the in-house fake: same requests, someone else's idea
of the answers. The synchronous client runs in a thread, off kmock's loop."""
from __future__ import annotations

import asyncio
from typing import Any

import kmock
import pytest

from kuryr_supervisor.kubernetes import nodes
from kuryr_supervisor.kubernetes.resource import getter
from kuryr_supervisor.kubernetes.wire import pod_from_json


def k8s_client(url: str) -> Any:
    from oslo_config import cfg

    from kuryr_supervisor.conf import kubernetes
    from kuryr_supervisor.kubernetes import client as k8s
    conf = cfg.ConfigOpts()
    kubernetes.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("api_root", url.rstrip("/"), "kubernetes")
    conf.set_override("node_name", "node-a", "kubernetes")
    return k8s.K8sClient.from_conf(conf, environ={})


@pytest.mark.asyncio
async def test_pods_node_and_health_against_kmock(
        kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects["v1/pods", "ns", "p1"] = {
        "metadata": {"namespace": "ns", "name": "p1", "uid": "uid-1"},
        "spec": {"nodeName": "node-a"}}
    kmock.objects["v1/nodes", None, "node-a"] = {
        "metadata": {"name": "node-a"}, "spec": {"podCIDR": "10.1.2.0/24"}}
    kmock["get /readyz"] << b"ok"
    client = k8s_client(str(kmock.url))
    pods, _ = await asyncio.to_thread(client.node_pods.list)
    assert [(p.namespace, p.name, p.uid) for p in pods] == [
        ("ns", "p1", "uid-1")]
    get_pod = getter(client.pods, pod_from_json)
    pod = await asyncio.to_thread(get_pod, "ns", "p1")
    assert pod is not None and pod.uid == "uid-1"
    assert await asyncio.to_thread(get_pod, "ns", "absent") is None
    node = await asyncio.to_thread(client.nodes.get, client.node)
    assert nodes.pod_cidr(node) == "10.1.2.0/24"
    assert (await asyncio.to_thread(client.probe, 1.0))[0]
    assert any(r.params.get("fieldSelector") == "spec.nodeName=node-a"
               for r in kmock["get /api/v1/pods"])
