"""The built-in port handler in this process (no daemon) against either
cloud (``[fake]`` and ``[real]``, tests/fixtures/clouds.py) and the
Kubernetes API fake: a restarted handler writes nothing, to Neutron or to
the PodPorts; a resync deletes a pod's extra port and a gone pod's port,
never another cluster's. Neutron is read through its API as admin and its
access log (``cloud.neutron_access``), never through the fake's internals.

The handler's other claims (bulk sizes, a lost or refused bulk) need the
fake's fault knobs: tests/unit/test_neutronport.py.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.ports import podports
from tests.fixtures.clouds import AnyCloud
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.leader import PODPORTS, WRITES
from tests.fixtures.porthandler import HandlerWorld
from tests.fixtures.realcloud import rest


class Counts:
    """Stands in for the shared state: counts the handler's failures."""

    def __init__(self) -> None:
        self.total = 0

    def record_handler_failure(self, component: Any) -> int:
        self.total += 1
        return self.total

    def record_handler_success(self, component: Any) -> None:
        pass


class World(HandlerWorld):
    def __init__(self, tmp_path: Path, cloud: AnyCloud, api: FakeAPI) -> None:
        self.cloud, self.api, self.counts = cloud, api, Counts()
        self.tag = f"kuryr-supervisor:{api.namespaces['kube-system']}"
        path = tmp_path / "controller.conf"
        path.write_text("\n".join(
            ["[DEFAULT]", "role = controller", "[neutron]"]
            + [f"{k} = {v}" for k, v in cloud.conf_overrides().items()]
            + ["[controller]", f"pod_network_id = {cloud.network_id}",
               f"pod_subnet_id = {cloud.subnet_id}",
               f"openstack_timeout = {10 if cloud.kind == 'real' else 5}"])
            + "\n")
        self.conf = cfg.ConfigOpts()
        conf_mod.register_opts(self.conf)
        self.conf(["--config-file", str(path)], default_config_files=[])

    def ports_for(self, device_id: str) -> list[dict[str, Any]]:
        return self.cloud.ports(device_id=device_id)

    def made_by_the_controller(self, device: str, tags: list[str]) -> str:
        """A port the controller's user makes in its project."""
        answer = rest.request("POST", self.cloud.neutron_url + "/v2.0/ports", {
            "port": {"network_id": self.cloud.network_id, "name": "extra",
                     "device_id": device, "device_owner": "compute:kuryr",
                     "tags": tags}}, token=self.cloud.token())
        return str(answer.expect(201)["port"]["id"])


@pytest.fixture
def world(tmp_path: Path, any_cloud: AnyCloud) -> Iterator[World]:
    api = FakeAPI().start()
    w = World(tmp_path, any_cloud, api)
    yield w
    api.stop()
    for port in any_cloud.ports(tags=w.tag):
        any_cloud.admin("DELETE", f"/v2.0/ports/{port['id']}")


def test_restart_writes_nothing(world: World,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """20 pods with ports and PodPorts; a new handler (a restart) lists
    pods, ports and PodPorts (in pages) and writes nothing, to Neutron or
    the API: by the servers' access logs."""
    monkeypatch.setattr(podports, "PAGE_SIZE", 7)
    pods = world.add(20)
    first = world.handler()
    world.start(first)
    assert world.ported(pods)
    wall, mono = time.time(), time.monotonic()
    second = world.handler()
    world.start(second)
    assert second.book.written == {p["metadata"]["uid"] for p in pods}
    k8s = [r for r in list(world.api.access) if r[0] >= mono]
    # No PodPort written (its status subresource carries Neutron's port
    # status, first written at the new handler's resync: the first one
    # never resynced).
    assert [r for r in k8s if r[1] in WRITES and r[2].startswith(PODPORTS)
            and not r[2].endswith("/status")] == []
    listed = [r for r in k8s
              if r[2] == "/apis/kuryr-supervisor.openstack.org/v1/podports"]
    assert len(listed) == 3                     # 20 PodPorts, 7 a page
    # Neutron: reads only, of ports (no subnet read: nothing is written)
    sent = [(m, p) for _, m, p, agent in world.cloud.neutron_access(wall)
            if agent.startswith("kuryr-supervisor/")]
    assert sent and {p for _, p in sent} == {"/v2.0/ports"}, sent
    assert {m for m, _ in sent} == {"GET"}, sent
    assert world.ported(pods) and world.counts.total == 0


def test_resync_sweeps_gone_pods_and_extra_ports(world: World) -> None:
    handler = world.handler()
    pods = world.add(3)
    world.start(handler)
    keep = pods[0]["metadata"]["uid"]
    [first] = world.ports_for(keep)
    gone, other = f"gone-{uuid.uuid4()}", f"other-{uuid.uuid4()}"
    world.made_by_the_controller(keep, [world.tag])            # a double
    world.made_by_the_controller(gone, [world.tag])            # a leak
    theirs = world.made_by_the_controller(other, ["kuryr-supervisor:x"])
    try:
        handler.resync({keep})
        assert [p["id"] for p in world.ports_for(keep)] == [first["id"]]
        assert world.ports_for(gone) == []
        assert len(world.ports_for(other)) == 1                # not ours
        assert world.ported(pods)
    finally:
        world.cloud.admin("DELETE", f"/v2.0/ports/{theirs}")
