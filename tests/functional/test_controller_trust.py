"""The controller trusts Neutron and survives it: a real controller daemon
against the Kubernetes, Keystone and Neutron fakes over real HTTP.

- Another cluster's ports sharing the project (another tag, no tag, another
  network, another project) are never swept; the controller's own leaked
  port is.
- A Keystone or Neutron that hangs (30 s) or answers 200 with garbage leaves
  the controller live and not ready, the reason named, no worker restarted,
  no handler failure counted.
"""
from __future__ import annotations

import ipaddress
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.controller import Cloud, cloud_fixture, controller_daemon
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.openstack import FakeNeutron
from tests.fixtures.tenant import podport, spec_for

cloud = pytest.fixture(cloud_fixture)


def our_tag(cloud: Cloud) -> str:
    return f"kuryr-supervisor:{cloud.api.namespaces['kube-system']}"


def restarts(d: Daemon) -> dict[str, int]:
    comps = json.loads(d.get("/status")[1])["components"]
    return {name: int(c["restarts"]) for name, c in comps.items()}


def not_ready(d: Daemon) -> tuple[int, str] | None:
    try:
        code, body = d.get("/ready?verbose")
    except OSError:                    # not listening yet
        return None
    return (code, body) if code != 200 else None


def test_other_clusters_ports_not_swept(tmp_path: Path, cloud: Cloud) -> None:
    neutron: FakeNeutron = cloud.neutron
    mine = our_tag(cloud)
    foreign = [
        neutron.add_foreign_port(device_id="gone-1",
                                 tags=["kuryr-supervisor:other-cluster"]),
        neutron.add_foreign_port(device_id="gone-2", tags=[]),
        neutron.add_foreign_port(device_id="gone-3", tags=[mine],
                                 network_id="another-network"),
        neutron.add_foreign_port(device_id="gone-4", tags=[mine],
                                 project_id="another-project"),
    ]
    leaked = neutron.add_foreign_port(device_id="gone-5", tags=[mine])
    d = controller_daemon(tmp_path, cloud)
    d.start()
    try:
        d.wait_ready()
        wait_until(lambda: leaked["id"] not in neutron.ports, 15)
        time.sleep(2.5)                       # another periodic sweep
        for port in foreign:
            assert port["id"] in neutron.ports, port
        # a pod's new port carries the cluster tag
        pod = cloud.api.add_pod("default", "tagged", "node-a")
        wait_until(lambda: cloud.podport("default", "tagged"), 10)
        [port] = neutron.ports_for(pod["metadata"]["uid"])
        assert port["tags"] == [mine]
        assert d.status()["handlerFailures"] == 0
    finally:
        d.close()


def test_explicit_cluster_id(tmp_path: Path, cloud: Cloud) -> None:
    d = controller_daemon(tmp_path, cloud, {"controller": {"cluster_id": "blue"}})
    d.start()
    try:
        d.wait_ready()
        pod = cloud.api.add_pod("default", "p", "node-a")
        wait_until(lambda: cloud.podport("default", "p"), 10)
        [port] = cloud.neutron.ports_for(pod["metadata"]["uid"])
        assert port["tags"] == ["kuryr-supervisor:blue"]
    finally:
        d.close()


@pytest.fixture
def controller(tmp_path: Path, cloud: Cloud) -> Iterator[Daemon]:
    d = controller_daemon(tmp_path, cloud, {
        "supervisor": {"handler_deadline": 3.0, "health_deadline": 4.0}})
    yield d
    d.close()


def hold_live_not_ready(d: Daemon, name: str, words: str,
                        seconds: float) -> str:
    """For ``seconds``: /alive 200, /ready 503 naming ``name``."""
    _, body = wait_until(lambda: not_ready(d), 15)
    assert f"[-]{name} failed" in body and words in body, body
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert d.probe("/alive") == 200
        time.sleep(0.25)
    return body


@pytest.mark.parametrize("fault", ["hang", "garbage"])
def test_keystone_fault_live_not_ready(controller: Daemon, cloud: Cloud,
                                       fault: str) -> None:
    """No token yet and Keystone hangs 30 s (or answers garbage): every
    deadline is shorter than the heartbeat deadlines, so nothing goes
    stale; readiness names Keystone."""
    if fault == "hang":
        cloud.keystone.hang = 30.0
    else:
        cloud.keystone.garbage = True
    cloud.api.add_pod("default", "waiting", "node-a")
    controller.start()
    body = hold_live_not_ready(controller, "keystone",
                               "no answer within" if fault == "hang"
                               else "Keystone", 12.0)
    print(body)
    assert set(restarts(controller).values()) == {0}
    assert controller.status()["handlerFailures"] == 0
    cloud.keystone.hang, cloud.keystone.garbage = 0.0, False
    controller.wait_ready(40)
    wait_until(lambda: cloud.podport("default", "waiting"), 40)
    assert set(restarts(controller).values()) == {0}


@pytest.mark.parametrize("fault", ["hang", "garbage"])
def test_neutron_fault_live_not_ready(controller: Daemon, cloud: Cloud,
                                      fault: str) -> None:
    controller.start()
    controller.wait_ready()
    if fault == "hang":
        cloud.neutron.hang = 30.0
    else:
        cloud.neutron.garbage = True
    cloud.api.add_pod("default", "waiting", "node-a")
    hold_live_not_ready(controller, "neutron",
                        "no answer within" if fault == "hang" else "not JSON",
                        12.0)
    assert cloud.podport("default", "waiting") is None
    assert set(restarts(controller).values()) == {0}
    assert controller.status()["handlerFailures"] == 0
    cloud.neutron.hang, cloud.neutron.garbage = 0.0, False
    controller.wait_ready(40)
    wait_until(lambda: cloud.podport("default", "waiting"), 40)


def test_preexisting_podport_is_not_proof(tmp_path: Path, cloud: Cloud) -> None:
    """A PodPort already there (an earlier pod's of the same name, or a
    forged one) is not taken as proof of a port: the controller asks
    Neutron, creates the port, and replaces the PodPort with its data."""
    uid = str(uuid.uuid4())
    fake_pod = {"metadata": {"namespace": "default", "name": "pre", "uid": uid}}
    forged_spec = spec_for(fake_pod, ipaddress.IPv4Network("10.20.0.0/24"), 99)
    cloud.api.put_podport(podport(fake_pod, forged_spec))
    d = controller_daemon(tmp_path, cloud)
    d.start()
    try:
        d.wait_ready()
        cloud.api.add_pod("default", "pre", "node-a", uid=uid)
        spec = wait_until(lambda: (lambda s: s if s and s["portId"] !=
                                   forged_spec["portId"] else None)(
            cloud.podport("default", "pre")), 15)
        [port] = cloud.neutron.ports_for(uid)
        assert spec["portId"] == port["id"]
        assert spec["address"] == port["fixed_ips"][0]["ip_address"] + "/24"
        assert d.status()["handlerFailures"] == 0
    finally:
        d.close()
