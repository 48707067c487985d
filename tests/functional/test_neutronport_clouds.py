"""The built-in port handler in this process (no daemon) against either
cloud, each with and without ML2's ``tag_ports_during_bulk_creation``
(``[fake]``, ``[fake-notags]``, ``[real]``, ``[real-notags]``,
tests/fixtures/clouds.py) and the Kubernetes API fake: pods get one port
each, tagged (after the create where Neutron drops a create's tags), with
a MAC derived from the pod's UID; a restarted handler writes nothing, to
Neutron or to the PodPorts (their status included); a resync deletes a
pod's extra port and a gone pod's port, never another cluster's; a port
whose tag call was lost is found and adopted, not doubled. Neutron is read through its API as admin and its
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

    def set_mode(self, mode: Any, present: bool) -> bool:
        return False


class World(HandlerWorld):
    def __init__(self, tmp_path: Path, cloud: AnyCloud, api: FakeAPI) -> None:
        self.cloud, self.api, self.counts = cloud, api, Counts()
        self.tag = f"kuryr-supervisor:{api.namespaces['kube-system']}"
        self.path = tmp_path / "controller.conf"
        self.as_user(cloud.username)

    def as_user(self, username: str) -> None:
        """The controller's options, logging in as ``username``."""
        cloud = self.cloud
        overrides = dict(cloud.conf_overrides(), username=username)
        self.path.write_text("\n".join(
            ["[DEFAULT]", "role = controller", "[neutron]"]
            + [f"{k} = {v}" for k, v in overrides.items()]
            + ["[controller]", f"pod_network_id = {cloud.network_id}",
               f"pod_subnet_id = {cloud.subnet_id}",
               f"openstack_timeout = {10 if cloud.kind == 'real' else 5}"])
            + "\n")
        self.conf = cfg.ConfigOpts()
        conf_mod.register_opts(self.conf)
        self.conf(["--config-file", str(self.path)], default_config_files=[])

    def ports_for(self, device_id: str) -> list[dict[str, Any]]:
        return self.cloud.ports(device_id=device_id)

    def made_by_the_controller(self, device: str, tags: list[str], *,
                               name: str = "extra") -> str:
        """A port the controller's user makes in its project, with
        ``tags`` (set through the tags API too: a Neutron without
        tag_ports_during_bulk_creation drops a create's)."""
        url = self.cloud.neutron_url + "/v2.0/ports"
        answer = rest.request("POST", url, {
            "port": {"network_id": self.cloud.network_id, "name": name,
                     "device_id": device, "device_owner": "compute:kuryr",
                     "tags": tags}}, token=self.cloud.token())
        port_id = str(answer.expect(201)["port"]["id"])
        if tags:
            rest.request("PUT", f"{url}/{port_id}/tags", {"tags": tags},
                         token=self.cloud.token()).expect(200)
        return port_id


@pytest.fixture
def world(tmp_path: Path, any_neutron: AnyCloud) -> Iterator[World]:
    api = FakeAPI().start()
    w = World(tmp_path, any_neutron, api)
    yield w
    w.stop_handlers()
    api.stop()
    for port in any_neutron.ports(device_owner="compute:kuryr"):
        if port["name"].startswith(f"{w.tag}:") or w.tag in port["tags"]:
            any_neutron.admin("DELETE", f"/v2.0/ports/{port['id']}")


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
    assert {u for u, p in second.book.pods.items() if p.written} == {
        p["metadata"]["uid"] for p in pods}
    k8s = [r for r in list(world.api.access) if r[0] >= mono]
    # No PodPort written, nor its status (written with the PodPort when
    # Neutron says more than DOWN, and read at start).
    second.resync(set(second.book.pods))
    assert [r for r in k8s if r[1] in WRITES
            and r[2].startswith(PODPORTS)] == []
    k8s = [r for r in list(world.api.access) if r[0] >= mono]
    listed = [r for r in k8s
              if r[2] == "/apis/kuryr-supervisor.openstack.org/v1/podports"]
    assert len(listed) == 3                     # 20 PodPorts, 7 a page
    # Neutron: reads only: the ports, and at start the pod network and
    # whether Neutron keeps a create's tags (no subnet read: nothing is
    # written)
    sent = [(m, p) for _, m, p, agent in world.cloud.neutron_access(wall)
            if agent.startswith("kuryr-supervisor/")]
    assert sent and {p for _, p in sent} <= {
        "/v2.0/ports", f"/v2.0/networks/{world.cloud.network_id}",
        "/v2.0/extensions/tag-ports-during-bulk-creation"}, sent
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


def test_one_tagged_port_each_with_a_derived_mac(world: World) -> None:
    """Each pod one port with the cluster's tag (after its create where
    Neutron drops a create's tags), its name carrying that tag, its MAC
    derived from the pod's UID; a second create for a pod is refused by
    Neutron (409) and the first's port adopted."""
    from kuryr_supervisor.controller.openstack import making
    pods = world.add(6)
    handler = world.handler()
    world.start(handler)
    assert world.ported(pods)
    for pod in pods:
        [port] = world.ports_for(pod["metadata"]["uid"])
        assert port["tags"] == [world.tag]
        assert port["name"] == f"{world.tag}:ns/{pod['metadata']['name']}"
        assert port["mac_address"] == making.derived_mac(pod["metadata"]["uid"])
    again = world.handler().maker
    again.detect(world.cloud.project_id)
    uid = pods[0]["metadata"]["uid"]
    [adopted] = again.make([making.Want("again", uid, derive=True)],
                           tags=[world.tag], timeout=30.0)
    assert adopted.id == world.ports_for(uid)[0]["id"]
    assert len(world.ports_for(uid)) == 1
    assert world.counts.total == 0


def test_a_port_whose_tag_call_was_lost_is_adopted(world: World) -> None:
    """A port made with the controller's name and owner but no tag (its
    tag call lost: the controller died between the create and the tag
    call, or Neutron dropped the create's tags): a restarted handler finds
    it by its name, tags and adopts it, and makes no second port; another
    untagged port is left alone."""
    pods = world.add(2)
    uid = pods[0]["metadata"]["uid"]
    name = f"{world.tag}:ns/{pods[0]['metadata']['name']}"
    lost = world.made_by_the_controller(uid, [], name=name)
    stranger = world.made_by_the_controller(f"other-{uuid.uuid4()}", [])
    try:
        handler = world.handler()
        world.start(handler)
        if world.cloud.bulk_tags:
            # A Neutron that keeps a create's tags never loses them: an
            # untagged port is not looked for (nor ever touched), and the
            # pod gets a tagged one.
            assert world.ported(pods[1:])
            ports = world.ports_for(uid)
            assert [p["id"] for p in ports if world.tag in p["tags"]] == [
                world.api.podports[("ns", "p0")]["spec"]["portId"]]
            assert [p["tags"] for p in ports if p["id"] == lost] == [[]]
            return
        assert world.ported(pods)
        [port] = world.ports_for(uid)
        assert port["id"] == lost and world.tag in port["tags"]
        [other] = [p for p in world.cloud.ports(name="extra")
                   if p["id"] == stranger]
        assert other["tags"] == []
    finally:
        world.cloud.admin("DELETE", f"/v2.0/ports/{stranger}")
        world.cloud.admin("DELETE", f"/v2.0/ports/{lost}")


def test_where_policy_refuses_macs_ports_get_neutrons(world: World) -> None:
    """A controller user that may not choose MACs (Neutron's policy): its
    first create is refused for them (403), and from then on ports are
    made with Neutron's MACs, one per pod, nothing counted."""
    world.as_user(world.cloud.nomac_username)
    pods = world.add(4)
    handler = world.handler()
    world.start(handler)
    assert handler.maker.modes.macs is False
    handler.retries.at = 0.0
    handler.tick()
    assert world.ported(pods)
    for pod in pods:
        [port] = world.ports_for(pod["metadata"]["uid"])
        assert port["mac_address"].startswith("fa:16:3e:")
    assert world.counts.total == 0
