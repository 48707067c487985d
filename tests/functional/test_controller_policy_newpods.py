"""The controller daemon with the port handler and the ``network_policy``
handler, against the fake Kubernetes API and the fake Neutron: a pod a
NetworkPolicy selects when it is created has its port made in the
policy's groups, and a pod its peer selects has its address in the
peer's address group, before its PodPort is written (the fakes' request
logs say the order; no PUT of the selected pod's port ever comes: its
groups were in its create). Fake only: the order is read from the fake
Neutron's log."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.clouds import controller_options
from tests.fixtures.daemon import Daemon
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.fakecloud import FakeCloud
from tests.functional.test_controller_policy import _groups_of, until

WEB = {"app": "web"}
CLIENT = {"role": "client"}
PODPORTS = "/apis/kuryr-supervisor.openstack.org/v1/namespaces/shop/podports"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def _new_pod(api: FakeAPI, name: str, labels: dict[str, str]
             ) -> dict[str, Any]:
    """A pod created with its labels (as a ReplicaSet makes it)."""
    obj = {"kind": "Pod", "apiVersion": "v1",
           "metadata": {"namespace": "shop", "name": name,
                        "uid": str(uuid.uuid4()), "labels": dict(labels)},
           "spec": {"nodeName": "node-a", "containers": [{"name": "c"}]}}
    api.load_pods([obj])
    return obj


def _podport_at(api: FakeAPI, since: float) -> float:
    """The first PodPort write after ``since`` (wall time)."""
    offset = time.time() - time.monotonic()
    return min(at + offset for at, m, p, _ in list(api.requests)
               if m in ("POST", "PUT", "PATCH") and p.startswith(PODPORTS)
               and at + offset >= since)


def test_a_new_pod_is_protected_before_its_podport(
        tmp_path: Path, api: FakeAPI, fake_cloud: FakeCloud) -> None:
    cloud = fake_cloud
    api.add_namespace("shop", {"team": "shop"})
    # The pods' node is registered before any pod lands on it, as the
    # kubelet registers it: its own group (its addresses) is made with
    # the policy's, not after the first pod on it.
    api.add_node("node-a", addresses={"InternalIP": "192.0.2.10"})
    d = Daemon(tmp_path, controller_options(
        cloud, api.url,
        controller={"handlers": "neutron_port,network_policy"},
        network_policy={"resync_interval": 5.0, "retry_max": 1.0}))
    d.start()
    try:
        d.wait_ready(60)
        policy = api.put_networkpolicy("shop", "web", {
            "podSelector": {"matchLabels": WEB},
            "ingress": [{"from": [{"podSelector": {"matchLabels": CLIENT}}],
                         "ports": [{"port": 80}]}]})
        mine = f"np:{policy['metadata']['uid']}"
        until(d, "the policy's group and address group", lambda: any(
            g["name"].endswith(mine) for g in cloud.admin(
                "GET", "/v2.0/security-groups").expect(200)[
                    "security_groups"]) and any(
            ":ag:" in g["name"] for g in cloud.admin(
                "GET", "/v2.0/address-groups").expect(200)[
                    "address_groups"]))
        since = time.time()
        _new_pod(api, "client-1", CLIENT)
        until(d, "the client's PodPort", lambda: ("shop", "client-1")
              in api.podports)
        address = api.podports[("shop", "client-1")]["spec"][
            "address"].split("/")[0]
        [group] = [g for g in cloud.admin("GET", "/v2.0/address-groups")
                   .expect(200)["address_groups"] if ":ag:" in g["name"]]
        assert f"{address}/32" in group["addresses"]
        joins = [t for t, m, p, _ in cloud.neutron_access(since)
                 if m == "PUT" and p.endswith("/add_addresses")]
        assert joins and joins[0] < _podport_at(api, since)
        since = time.time()
        web = _new_pod(api, "web-1", WEB)
        until(d, "the web pod's PodPort", lambda: ("shop", "web-1")
              in api.podports)
        uid = web["metadata"]["uid"]
        assert any(n.endswith(mine) for n in _groups_of(cloud, uid))
        [port] = cloud.ports(device_id=uid)
        creates = [t for t, m, p, _ in cloud.neutron_access(since)
                   if m == "POST" and p == "/v2.0/ports"]
        puts = [p for t, m, p, _ in cloud.neutron_access(since)
                if m == "PUT" and p == f"/v2.0/ports/{port['id']}"]
        assert puts == []               # its groups came with its create
        assert creates and creates[0] < _podport_at(api, since)
        text = d.log()
        assert "Traceback" not in text and " ERROR " not in text
    finally:
        d.close()
