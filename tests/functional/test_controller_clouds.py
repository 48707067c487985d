"""The controller daemon against either cloud (``[fake]`` and ``[real]``,
tests/fixtures/clouds.py): what it does to Neutron and the PodPorts, read
through Neutron's API as admin, never through the fake's internals, so
the same test holds for the real Keystone and Neutron.

- a pod gets one port (``device_id`` = its UID, ``device_owner``,
  ``binding:host_id`` = its node, the cluster's tag) and a PodPort naming
  it; the port goes with the pod, or when it finishes (while the
  controller runs, or at its next start); a host-network pod gets none;
- pods present at start are ported; a port whose pod went while no
  controller ran is swept at the next start, another cluster's or
  project's ports never are;
- the port quota exhausted: not ready naming Neutron and the count, live,
  the waiting pod not a handler failure, ported once quota is back;
- a PodPort already there is not proof of a port.

The real cloud is shared by the session: every pod has a name of its own,
every port is counted by its pod's UID or its test's tag, and whatever a
test makes is deleted at its end, failed or not. Fault injection (hangs,
garbage, delays, a subnet without gateway) stays with the fake: see
test_controller.py and test_controller_trust.py.
"""
from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.clouds import AnyCloud, controller_options
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.realcloud import rest
from tests.fixtures.tenant import podport, spec_for


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def daemon(tmp_path: Path, cloud: AnyCloud, api: FakeAPI,
           **groups: dict[str, Any]) -> Daemon:
    return Daemon(tmp_path, controller_options(cloud, api.url, **groups))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def spec(api: FakeAPI, namespace: str, name: str) -> dict[str, Any] | None:
    obj = api.podports.get((namespace, name))
    return dict(obj["spec"]) if obj else None


def our_tag(api: FakeAPI) -> str:
    """The cluster tag (the kube-system namespace's UID: one per API)."""
    return f"kuryr-supervisor:{api.namespaces['kube-system']}"


def prefix(cloud: AnyCloud) -> int:
    return ipaddress.ip_network(cloud.cidr).prefixlen


def not_ready(d: Daemon) -> tuple[int, str] | None:
    answer = d.get("/ready?verbose")
    return answer if answer[0] != 200 else None


def delete_ports(cloud: AnyCloud, **query: Any) -> None:
    for port in cloud.ports(**query):
        cloud.admin("DELETE", f"/v2.0/ports/{port['id']}")


def test_role_runs_handler_and_health(tmp_path: Path, any_cloud: AnyCloud,
                                      api: FakeAPI) -> None:
    d = daemon(tmp_path, any_cloud, api).start()
    try:
        d.wait_ready(60)
        status = d.status()
        assert sorted(status["components"]) == ["handler:neutron_port", "health"]
        code, body = d.get("/ready?verbose")
        assert code == 200
        for check in ("k8s-watch", "keystone", "neutron", "handler-synced"):
            assert f"[+]{check} ok" in body, body
        assert "watcher" not in d.get("/alive?verbose")[1]
    finally:
        d.close()


def test_pod_gets_port_then_loses_it(tmp_path: Path, any_cloud: AnyCloud,
                                     api: FakeAPI) -> None:
    cloud = any_cloud
    d = daemon(tmp_path, cloud, api).start()
    name, hn = unique("web"), unique("hn")
    try:
        d.wait_ready(60)
        pod = api.add_pod("default", name, "node-a")
        uid = pod["metadata"]["uid"]
        note = wait_until(lambda: spec(api, "default", name), 60)
        [port] = cloud.ports(device_id=uid)
        assert note["portId"] == port["id"] and note["podUid"] == uid
        assert note["mac"] == port["mac_address"]
        assert note["address"] == \
            f"{port['fixed_ips'][0]['ip_address']}/{prefix(cloud)}"
        assert note["gateway"] == cloud.gateway
        assert port["device_owner"] == "compute:kuryr"
        assert port["binding:host_id"] == "node-a"
        assert port["tags"] == [our_tag(api)]
        assert port["network_id"] == cloud.network_id
        assert port["project_id"] == cloud.project_id
        # host-network pods get no port
        other = api.add_pod("default", hn, "node-a", hostNetwork=True)
        api.delete_pod("default", name)
        wait_until(lambda: cloud.count_ports(device_id=uid) == 0, 60)
        time.sleep(1.0)
        assert cloud.count_ports(device_id=other["metadata"]["uid"]) == 0
        assert cloud.count_ports(tags=our_tag(api)) == 0
        assert d.status()["handlerFailures"] == 0
    finally:
        d.close()
        delete_ports(cloud, tags=our_tag(api))


def test_finished_pods_give_their_ports_back(
        tmp_path: Path, any_cloud: AnyCloud, api: FakeAPI) -> None:
    """Pods that finished (Succeeded, Failed) while no controller ran give
    their ports and PodPorts back at its start; those that finish while it
    runs, at once, and a pod that waited for the quota they held gets its
    port; the other pods keep theirs."""
    cloud = any_cloud
    d = daemon(tmp_path, cloud, api).start()
    jobs = [api.add_pod("default", unique("job"), "node-a") for _ in range(4)]
    names = [p["metadata"]["name"] for p in jobs]

    def released(pods: list[dict[str, Any]]) -> bool:
        return all(cloud.count_ports(device_id=p["metadata"]["uid"]) == 0
                   and spec(api, "default", p["metadata"]["name"]) is None
                   for p in pods)
    try:
        d.wait_ready(60)
        wait_until(lambda: all(spec(api, "default", n) for n in names), 60)
        d.close()
        api.set_phase("default", names[0], "Succeeded")
        api.set_phase("default", names[1], "Failed")
        d.start()
        wait_until(lambda: released(jobs[:2]), 60)
        assert all(cloud.count_ports(device_id=p["metadata"]["uid"]) == 1
                   for p in jobs[2:])
        cloud.set_port_quota(cloud.ports_used())    # the jobs hold the last
        wait_until(lambda: not_ready(d), 30)
        late = unique("late")
        api.add_pod("default", late, "node-a")
        for name in names[2:]:
            api.set_phase("default", name, "Succeeded")
        note = wait_until(lambda: spec(api, "default", late), 60)
        wait_until(lambda: released(jobs), 30)
        [port] = cloud.ports(device_id=api.pods[("default", late)][
            "metadata"]["uid"])
        assert note["portId"] == port["id"]
        d.wait_ready(30)
        assert d.status()["handlerFailures"] == 0
    finally:
        cloud.set_port_quota(500)
        d.close()
        delete_ports(cloud, tags=our_tag(api))


def test_pods_existing_at_start_and_leaked_ports(
        tmp_path: Path, any_cloud: AnyCloud, api: FakeAPI) -> None:
    """Pods that exist before the controller starts get ports; ports whose
    pod is gone (deleted while no controller ran) are swept."""
    cloud = any_cloud
    early, gone = unique("early"), unique("gone")
    existing = api.add_pod("ns1", early, "node-a")
    leaked = api.add_pod("ns1", gone, "node-a")
    d = daemon(tmp_path, cloud, api)
    d.start()
    try:
        wait_until(lambda: spec(api, "ns1", gone) and spec(api, "ns1", early),
                   60)
        d.close()
        api.delete_pod("ns1", gone)              # while the controller is down
        assert cloud.count_ports(device_id=leaked["metadata"]["uid"]) == 1
        d.start()
        wait_until(lambda: cloud.count_ports(
            device_id=leaked["metadata"]["uid"]) == 0, 60)
        assert cloud.count_ports(device_id=existing["metadata"]["uid"]) == 1
    finally:
        d.close()
        delete_ports(cloud, tags=our_tag(api))


def test_quota_exhausted_not_ready_named(tmp_path: Path, any_cloud: AnyCloud,
                                         api: FakeAPI) -> None:
    cloud = any_cloud
    d = daemon(tmp_path, cloud, api).start()
    a, b = unique("a"), unique("b")
    try:
        d.wait_ready(60)
        api.add_pod("default", a, "node-a")
        wait_until(lambda: spec(api, "default", a), 60)
        used = cloud.ports_used()
        cloud.set_port_quota(used)
        before = time.time()
        code, body = wait_until(lambda: not_ready(d), 30)
        assert "[-]neutron failed" in body and "port quota exhausted" in body, body
        check = d.status()["checks"]["neutron"]
        assert f"{used} of {used} ports used" in check["message"], check
        from datetime import datetime
        since = datetime.fromisoformat(check["since"].replace("Z", "+00:00"))
        assert since.timestamp() >= before - 1
        # a pod that cannot get a port waits; it is not the handler's failure
        api.add_pod("default", b, "node-a")
        time.sleep(3.0)
        assert spec(api, "default", b) is None
        assert d.probe("/alive") == 200
        assert d.status()["handlerFailures"] == 0
        cloud.set_port_quota(500)
        wait_until(lambda: spec(api, "default", b), 60)
        d.wait_ready(30)
    finally:
        cloud.set_port_quota(500)
        d.close()
        delete_ports(cloud, tags=our_tag(api))


def test_other_clusters_ports_not_swept(tmp_path: Path, any_cloud: AnyCloud,
                                        api: FakeAPI) -> None:
    """Ports of another cluster sharing the project (another tag, no tag),
    and ports with our tag on another project's network or of another
    project, are never swept; our own leaked port is."""
    cloud, mine = any_cloud, our_tag(api)
    test = unique("trust")

    def ours(device: str, tags: list[str]) -> dict[str, Any]:
        """A port the controller's user makes in its project."""
        return dict(rest.request("POST", cloud.neutron_url + "/v2.0/ports", {
            "port": {"network_id": cloud.network_id, "name": "foreign",
                     "device_id": f"{test}-{device}",
                     "device_owner": "compute:kuryr", "tags": tags}},
            token=cloud.token()).expect(201)["port"])
    foreign = [
        ours("1", ["kuryr-supervisor:other-cluster"]),
        ours("2", []),
        cloud.foreign_port(f"{test}-3", on_pod_network=False, tags=[mine]),
        cloud.foreign_port(f"{test}-4", on_pod_network=True, tags=[mine]),
    ]
    leaked = ours("5", [mine])
    d = daemon(tmp_path, cloud, api).start()
    try:
        d.wait_ready(60)
        wait_until(lambda: not cloud.ports(id=leaked["id"]), 60)
        time.sleep(6.0)                       # another periodic sweep
        for port in foreign:
            assert cloud.ports(id=port["id"]), port
        assert d.status()["handlerFailures"] == 0
    finally:
        d.close()
        for port in foreign:
            cloud.admin("DELETE", f"/v2.0/ports/{port['id']}")


def test_explicit_cluster_id_and_a_podport_that_is_not_proof(
        tmp_path: Path, any_cloud: AnyCloud, api: FakeAPI) -> None:
    """``cluster_id`` names the tag. A PodPort already there (an earlier
    pod's of the same name, or a forged one) is not taken as proof of a
    port: the controller asks Neutron, creates the port, and replaces the
    PodPort with its data."""
    cloud = any_cloud
    cluster, name = unique("blue"), unique("pre")
    uid = str(uuid.uuid4())
    fake_pod = {"metadata": {"namespace": "default", "name": name, "uid": uid}}
    forged = spec_for(fake_pod, ipaddress.IPv4Network(cloud.cidr), 99)
    api.put_podport(podport(fake_pod, forged))
    d = daemon(tmp_path, cloud, api,
               controller={"cluster_id": cluster}).start()
    try:
        d.wait_ready(60)
        api.add_pod("default", name, "node-a", uid=uid)
        got = wait_until(lambda: (lambda s: s if s and s["portId"] !=
                                  forged["portId"] else None)(
            spec(api, "default", name)), 60)
        [port] = cloud.ports(device_id=uid)
        assert got["portId"] == port["id"]
        assert got["address"] == \
            f"{port['fixed_ips'][0]['ip_address']}/{prefix(cloud)}"
        assert port["tags"] == [f"kuryr-supervisor:{cluster}"]
        assert d.status()["handlerFailures"] == 0
    finally:
        d.close()
        delete_ports(cloud, tags=f"kuryr-supervisor:{cluster}")
