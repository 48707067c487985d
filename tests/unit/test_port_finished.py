"""Finished pods (phase Succeeded or Failed) give their ports back: the
port handler's sink in this process, against the Kubernetes API fake and
the Neutron fake over real HTTP.

- a pod that finishes has its port and PodPort deleted at once, as a
  deleted pod's, and nothing of it is released twice (its next events,
  the resyncs, its deletion write nothing);
- a pod in any other phase, or being deleted, keeps its port; a stale
  event (an older pod of the same name, a phase after a terminal one)
  releases or makes nothing;
- a new handler (a restart, a new leader) releases what pods that finished
  while none ran still hold, and writes nothing for one whose port and
  PodPort are gone;
- a release Neutron refuses is tried again by the next resync, never
  counted.

Pools: tests/unit/test_portpool_finished.py."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kuryr_supervisor.controller.ports.handler import NeutronPortHandler
from kuryr_supervisor.kubernetes.clusterpods import ClusterPod, cluster_pod
from tests.unit import test_neutronport as base
from tests.unit.test_neutronport import World, arrive

#: The fixture of the handler's tests.
world = base.world


def finish(w: World, pod: dict[str, Any], phase: str = "Succeeded"
           ) -> ClusterPod:
    """The kubelet says the pod's phase; the event the handler gets."""
    meta = pod["metadata"]
    return cluster_pod(w.api.set_phase(meta["namespace"], meta["name"], phase))


def holds(w: World, pod: dict[str, Any]) -> bool:
    """The pod still has a port or a PodPort."""
    meta = pod["metadata"]
    return bool(w.ports_for(meta["uid"])) or \
        (meta["namespace"], meta["name"]) in w.api.podports


def resync(handler: NeutronPortHandler) -> None:
    """The periodic resync, as the handler's tick makes it."""
    handler.resync({uid for uid, pod in handler.book.pods.items()
                    if pod.port_id})


def ported(w: World, count: int) -> tuple[NeutronPortHandler,
                                          list[dict[str, Any]]]:
    handler = w.handler()
    w.start(handler)
    pods = w.add(count)
    arrive(handler, pods)
    assert w.ported(pods)
    return handler, pods


def test_a_finished_pod_gives_its_port_back_once(world: World) -> None:
    handler, pods = ported(world, 4)
    handler.upsert(finish(world, pods[0]))
    handler.upsert(finish(world, pods[1], "Failed"))
    assert not holds(world, pods[0]) and not holds(world, pods[1])
    assert world.ported(pods[2:])
    assert len(world.neutron.ports) == 2
    book = handler.book
    assert {p.uid for p in book.finished()} == {
        p["metadata"]["uid"] for p in pods[:2]}
    assert not any(p.node or p.written or p.named or p.port_id
                   for p in book.finished())
    before = world.writes()
    # Nothing is released twice: its next event, a resync, a relist and
    # its deletion write nothing.
    handler.upsert(cluster_pod(pods[0]))
    resync(handler)
    world.start(handler)
    world.api.delete_pod("ns", pods[0]["metadata"]["name"])
    handler.delete(cluster_pod(pods[0]))
    assert world.writes() == before
    assert world.ported(pods[2:]) and world.counts.total == 0


@pytest.mark.parametrize("phase", ["", "Pending", "Running", "Unknown"])
def test_only_a_finished_pod_gives_its_port_back(world: World,
                                                 phase: str) -> None:
    """A pod in another phase, or being deleted, keeps its port and its
    PodPort (as before: a pod being deleted gives them back once it is
    gone); a pod beside it that finishes gives its own back."""
    handler, pods = ported(world, 3)
    keep, leaving, done = pods
    handler.upsert(finish(world, keep, phase))
    world.api.modify_pod("ns", leaving["metadata"]["name"],
                         deletionTimestamp="2026-01-01T00:00:00Z")
    handler.upsert(cluster_pod(leaving))
    handler.upsert(finish(world, done))
    resync(handler)
    assert world.ported([keep, leaving]) and not holds(world, done)
    world.api.delete_pod("ns", leaving["metadata"]["name"])
    handler.delete(cluster_pod(leaving))
    assert world.ported([keep]) and not holds(world, leaving)


def test_a_stale_event_releases_and_makes_nothing(world: World) -> None:
    handler, pods = ported(world, 2)
    old, other = pods
    # An older pod of that name: its finished event comes after it was
    # deleted and a new pod of the same name got its port.
    stale = dataclasses.replace(cluster_pod(old), phase="Succeeded")
    world.api.delete_pod("ns", old["metadata"]["name"])
    handler.delete(cluster_pod(old))
    new = world.api.add_pod("ns", old["metadata"]["name"], "node-a")
    arrive(handler, [new])
    assert world.ported([new, other])
    before = world.writes()
    handler.upsert(stale)
    resync(handler)
    assert world.ported([new, other]) and world.writes() == before
    # A pod seen finished gives its port back; an event that says it runs
    # again (out of date: a pod never leaves a terminal phase) makes it
    # no port.
    handler.upsert(finish(world, other, "Failed"))
    assert not holds(world, other)
    before = world.writes()
    handler.upsert(dataclasses.replace(cluster_pod(other), phase="Running"))
    arrive(handler, [])
    resync(handler)
    assert not holds(world, other) and world.writes() == before
    assert world.ported([new])


def test_a_new_handler_releases_what_finished_pods_hold(world: World) -> None:
    """The pods finish while no handler runs (a restart, a leader
    handover): the next one's first list and resync release their ports
    and PodPorts, and write nothing for a pod whose port and PodPort are
    gone already, nor ever again."""
    first, pods = ported(world, 5)
    both, failed, portless, bare, running = pods
    assert first.cloud is not None
    for pod in (portless, bare):      # an admin deleted the port
        first.cloud.delete_port(world.ports_for(pod["metadata"]["uid"])[0]["id"])
    world.api.client().podports.delete(bare["metadata"]["name"], namespace="ns")
    finish(world, both)
    finish(world, failed, "Failed")
    finish(world, portless)
    finish(world, bare)
    before = world.writes()
    second = world.handler()
    world.start(second)
    assert not any(holds(world, p) for p in (both, failed, portless, bare))
    assert world.ported([running])
    writes = world.writes()
    assert writes["DELETE /v2.0/ports/{id}"] - before[
        "DELETE /v2.0/ports/{id}"] == 2
    assert writes["podport writes"] - before["podport writes"] == 3
    resync(second)
    third = world.handler()
    world.start(third)
    assert world.writes() == writes and world.ported([running])
    assert world.counts.total == 0


def test_a_refused_release_is_tried_again(world: World) -> None:
    handler, pods = ported(world, 2)
    [port] = world.ports_for(pods[0]["metadata"]["uid"])
    world.neutron.refuse_deletes.add(port["id"])
    handler.upsert(finish(world, pods[0]))
    assert world.ports_for(pods[0]["metadata"]["uid"]) == [port]
    world.neutron.refuse_deletes.clear()
    handler.resync(set())
    assert not holds(world, pods[0]) and world.ported(pods[1:])
    assert world.counts.total == 0
