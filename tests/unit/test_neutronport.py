"""The built-in handler in this process (no daemon), against the Kubernetes
API, Keystone and Neutron fakes over real HTTP: pods arriving together
share one bulk create; a bulk whose answer is lost is looked up before
anything is created again; a refused bulk holds back only its refused pod.

Fake only: the bulk sizes follow the fake's time per port, and a lost or
refused bulk is a fault knob of the fake. A restart that writes nothing
and a resync's sweep run against both clouds:
tests/functional/test_neutronport_clouds.py."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.controller.ports.batch import Batch
from kuryr_supervisor.controller.ports.handler import NeutronPortHandler
from kuryr_supervisor.kubernetes.clusterpods import cluster_pod
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.openstack import FakeKeystone, FakeNeutron
from tests.fixtures.porthandler import HandlerWorld
from tests.unit.test_openstack import neutron_conf

PODPORTS = "/apis/kuryr-supervisor.openstack.org/v1/namespaces/ns/podports"


class Counts:
    """Stands in for the shared state: counts the handler's failures."""

    def __init__(self) -> None:
        self.failures = 0       # consecutive, as the budget counts them
        self.total = 0

    def record_handler_failure(self, component: Any) -> int:
        self.failures += 1
        self.total += 1
        return self.failures

    def record_handler_success(self, component: Any) -> None:
        self.failures = 0

    def set_mode(self, mode: Any, present: bool) -> bool:
        """How ports are made (readiness): not looked at here."""
        return False


class Steps:
    """A monotonic clock a test moves on (the batch window's)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class World(HandlerWorld):
    api: FakeAPI
    neutron: FakeNeutron
    conf: Any
    counts: Counts

    def handler(self, *, batch: Batch | None = None,
                **ctx: Any) -> NeutronPortHandler:
        """A handler whose batch window runs on a clock :func:`arrive`
        moves on: no test sleeps through it."""
        return super().handler(
            batch=Batch(clock=Steps()) if batch is None else batch, **ctx)

    def ports_for(self, device_id: str) -> list[dict[str, Any]]:
        return self.neutron.ports_for(device_id)

    def writes(self) -> dict[str, int]:
        """Neutron's writes by method and path, and the PodPort writes, as
        the fakes logged them (for the fault tests that count them)."""
        out = {k: n for k, n in self.neutron.counts().items()
               if k.split()[0] in ("POST", "PUT", "DELETE")}
        out["podport writes"] = sum(1 for _, m, p, _ in self.api.requests
                                    if m in ("POST", "PUT", "DELETE") and
                                    p.startswith(PODPORTS))
        return out


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    api = FakeAPI().start()
    keystone = FakeKeystone().start()
    neutron = FakeNeutron(keystone).start()
    conf = neutron_conf(tmp_path, keystone, pod_network_id=neutron.network_id,
                        pod_subnet_id=neutron.subnet["id"])
    world = World(api, neutron, conf, Counts())
    yield world
    world.stop_handlers()
    neutron.stop()
    keystone.stop()
    api.stop()


def arrive(handler: NeutronPortHandler, pods: list[dict[str, Any]]) -> None:
    """The pods' ADDED events, then the loop's wake-up once the window ends."""
    for pod in pods:
        handler.upsert(cluster_pod(pod))
    window_ends(handler)
    handler.tick()


def window_ends(handler: NeutronPortHandler) -> None:
    """The batch window's clock moves to the end of the window."""
    clock = handler.batch.clock
    assert isinstance(clock, Steps)
    clock.now += handler.batch.wake_in()


def test_pods_arriving_together_share_one_bulk_create(world: World) -> None:
    """The first request of a process measures Neutron with 10 ports; the
    rest of the batch goes in one request sized from that."""
    handler = world.handler()
    world.start(handler)
    pods = world.add(30)
    arrive(handler, pods)
    assert world.ported(pods)
    assert world.neutron.bulk_sizes == [10, 20]
    more = world.add(30, "more")
    arrive(handler, more)                          # measured: one request
    assert world.ported(more) and world.neutron.bulk_sizes == [10, 20, 30]
    counts = world.neutron.counts()
    assert counts["POST /v2.0/ports"] == 3
    assert counts["GET /v2.0/ports"] == 1            # the start's resync only
    assert world.counts.total == 0


def test_a_full_batch_goes_at_once(world: World) -> None:
    handler = world.handler()
    world.start(handler)
    handler.batch.size = 10
    pods = world.add(25)
    for pod in pods:
        handler.upsert(cluster_pod(pod))     # no tick: only full batches go
    assert world.neutron.bulk_sizes == [10, 10]
    window_ends(handler)
    handler.tick()
    assert world.neutron.bulk_sizes == [10, 10, 5] and world.ported(pods)


def test_lost_bulk_answer_is_looked_up_not_doubled(world: World) -> None:
    handler = world.handler()
    world.start(handler)
    world.neutron.lose_bulk_answers = 1
    pods = world.add(8)
    arrive(handler, pods)
    # Neutron made the ports; the handler never heard of them
    assert len(world.neutron.ports) == 8 and world.api.podports == {}
    assert handler.book.uncertain and len(handler.retries.pending) == 8
    assert world.counts.total == 0              # an outage, not a fault
    # a pod arriving now is not created before Neutron is listed again
    late = world.add(1, "late")
    handler.retries.at = 0.0
    arrive(handler, late)
    assert world.ported(pods + late)
    assert len(world.neutron.ports) == 9
    assert world.neutron.bulk_sizes == [8, 1]
    assert not handler.retries.pending and not handler.book.uncertain


def test_refused_bulk_holds_back_only_the_refused_pod(world: World) -> None:
    handler = world.handler()
    world.start(handler)
    pods = world.add(6)
    tag = f"kuryr-supervisor:{world.api.namespaces['kube-system']}"
    world.neutron.refuse_name = f"{tag}:ns/p3"
    arrive(handler, pods)
    good = [p for p in pods if p["metadata"]["name"] != "p3"]
    assert world.ported(good)
    assert world.neutron.ports_for(pods[3]["metadata"]["uid"]) == []
    assert world.counts.total == 1 and handler.retries.pending == {pods[3]["metadata"]["uid"]}
    assert len(world.neutron.ports) == 5
    world.neutron.refuse_name = ""
    handler.retries.at = 0.0
    handler.tick()                              # the retry: list, then create
    assert world.ported(pods) and len(world.neutron.ports) == 6
    assert world.counts.total == 1 and not handler.retries.pending
