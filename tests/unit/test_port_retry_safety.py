"""The port handler against a slow Neutron that serves requests
concurrently and commits a create whether or not its client still waits
(the fake's fault knobs), in this process, over real HTTP:

- a burst of 100 pods ends with exactly one port per pod, and no pod ever
  has two ports (sampled while it runs);
- a create whose answer timed out is waited for, not sent again, and its
  late ports are adopted;
- a create committed even after that wait is settled keeping the port
  the PodPort names: the PodPort never changes;
- a port an admin deleted is made again with the same address and MAC;
  when Neutron refuses that, the pod is reported and left alone;
- a port list that once answers no port deletes nothing, re-points
  nothing, creates nothing;
- a Neutron that ignores tag filters: the sweep deletes nothing that is
  not proven ours (another cluster's and untagged ports survive), and
  ports are still created;
- a full pod subnet is not the handler's fault: the waiting pods get a
  Warning Event, and nothing is counted.
"""
from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.controller.ports.handler import NeutronPortHandler
from kuryr_supervisor.kubernetes.clusterpods import cluster_pod
from kuryr_supervisor.state import Fault, Mode
from tests.fixtures.daemon import wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.openstack import FakeKeystone, FakeNeutron
from tests.unit.test_neutronport import Counts, World, arrive, window_ends
from tests.unit.test_openstack import neutron_conf


class FaultCounts(Counts):
    """The shared state's fault and mode bits too."""

    def __init__(self) -> None:
        super().__init__()
        self.fault_bits = Fault.NONE
        self.mode_bits = Mode.NONE

    def set_fault(self, fault: Fault, present: bool) -> bool:
        before = self.fault_bits
        self.fault_bits = before | fault if present else before & ~fault
        return before != self.fault_bits

    def set_mode(self, mode: Mode, present: bool) -> bool:
        before = self.mode_bits
        self.mode_bits = before | mode if present else before & ~mode
        return before != self.mode_bits


def make_world(tmp_path: Path, *, cidr: str = "10.20.0.0/22",
               **controller: object) -> World:
    api = FakeAPI().start()
    keystone = FakeKeystone().start()
    gateway = cidr.split("/")[0].rsplit(".", 1)[0] + ".1"
    neutron = FakeNeutron(keystone, cidr=cidr, gateway=gateway).start()
    opts: dict[str, object] = {"openstack_timeout": 1.0}
    opts.update(controller)
    conf = neutron_conf(tmp_path, keystone, pod_network_id=neutron.network_id,
                        pod_subnet_id=neutron.subnet["id"], **opts)
    return World(api, neutron, conf, FaultCounts())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = make_world(tmp_path)
    yield w
    stop(w)


def stop(w: World) -> None:
    w.stop_handlers()
    w.neutron.stop()
    w.neutron.keystone.stop()
    w.api.stop()


class DuplicateWatch:
    """Samples Neutron's store every 10 ms: the most ports one pod had."""

    def __init__(self, neutron: FakeNeutron) -> None:
        self.neutron = neutron
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DuplicateWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            with self.neutron.lock:
                per = collections.Counter(p["device_id"] for p in
                                          self.neutron.ports.values())
            self.most = max([self.most, *per.values()])


def drive(handler: NeutronPortHandler, done: Any, timeout: float) -> None:
    """The watch loop's part: tick until ``done()``, waking as it would."""
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, "not done in time"
        handler.tick()
        if len(handler.batch):
            window_ends(handler)        # the batch window: its own clock
        else:
            time.sleep(0.05)


def start(w: World, pods: list[dict[str, Any]]) -> NeutronPortHandler:
    handler = w.handler()
    w.start(handler)
    for pod in pods:
        handler.upsert(cluster_pod(pod))
    return handler


def macs_refused(handler: NeutronPortHandler) -> NeutronPortHandler:
    """After its first create, refused for the MACs it asked (Neutron's
    policy): its next try, made with Neutron's MACs."""
    assert handler.maker.modes.macs is False
    handler.retries.at = 0.0
    handler.tick()
    return handler


def bind(w: World, pods: list[dict[str, Any]]) -> None:
    """What the CNI role does once a pod holds its address."""
    client = w.api.client()
    for pod in pods:
        client.podports.patch(pod["metadata"]["name"], {"status": {
            "boundAt": "2026-11-26T00:00:00Z"}},
            namespace=pod["metadata"]["namespace"], subresource="status")


def specs(w: World) -> dict[tuple[str, str], dict[str, Any]]:
    return {k: dict(v["spec"]) for k, v in w.api.podports.items()}


def test_burst_of_100_one_port_each_never_two(world: World) -> None:
    """0.02-0.08 s a port, 4 creates worked on at once: a bulk of 100 takes
    several times the 1 s openstack_timeout."""
    world.neutron.faults.port_latency = (0.02, 0.08)
    world.neutron.faults.workers = 4
    pods = world.add(100)
    with DuplicateWatch(world.neutron) as dups:
        handler = start(world, [])
        for pod in pods:
            handler.upsert(cluster_pod(pod))
        drive(handler, lambda: world.ported(pods), 60)
    assert dups.most == 1
    assert len(world.neutron.ports) == 100
    assert world.neutron.faults.late_commits == 0      # no create timed out
    assert world.counts.total == 0
    assert handler.pace.ewma is not None and handler.pace.batch_size() < 100


def test_a_create_that_timed_out_is_waited_for_not_repeated(tmp_path: Path) -> None:
    """Where Neutron's policy refuses the MACs the controller would derive
    (creates are not idempotent): a create whose answer was lost is waited
    for, never sent again while it may commit (with derived MACs it is
    sent again at once: tests/unit/test_port_macs.py)."""
    w = make_world(tmp_path, port_create_timeout_per_port=0.1)
    try:
        w.neutron.refuse_macs = True
        w.neutron.faults.port_latency = (1.0, 1.0)      # 3 ports: 3 s
        pods = w.add(3)
        with DuplicateWatch(w.neutron) as dups:
            handler = macs_refused(start(w, pods))
            assert handler.book.creates() and not w.neutron.ports    # 1.3 s timeout
            w.neutron.faults.port_latency = (0.0, 0.0)
            drive(handler, lambda: w.ported(pods), 20)
        assert dups.most == 1 and len(w.neutron.ports) == 3
        # the one refused for its MACs, then the one never re-sent
        assert w.neutron.counts()["POST /v2.0/ports"] == 2
        assert w.neutron.faults.late_commits == 1
        assert not handler.book.creates() and w.counts.total == 0
    finally:
        stop(w)


def test_a_later_commit_is_settled_keeping_the_podport(tmp_path: Path) -> None:
    """The late bulk commit: a create whose answer timed out commits after
    its pods got other ports and PodPorts; the PodPorts never change, the
    late ports are deleted. Where the MACs are Neutron's: with derived
    ones the late commit is refused by Neutron."""
    w = make_world(tmp_path, port_create_timeout_per_port=0.1)
    try:
        w.neutron.refuse_macs = True
        w.neutron.faults.port_latency = (4.0, 4.0)      # commits at 8 s
        pods = w.add(2)
        handler = macs_refused(start(w, pods))          # 1.2 s timeout
        until = max(t for _, t in handler.book.creates())
        w.neutron.faults.port_latency = (0.0, 0.0)
        drive(handler, lambda: w.ported(pods), 20)      # made again at 3.6 s
        assert time.monotonic() >= until
        before = specs(w)
        drive(handler, lambda: len(w.neutron.ports) == 4, 20)   # the late ones
        assert w.neutron.faults.late_commits == 1
        handler.resync(set(handler.book.pods))
        assert w.ported(pods) and len(w.neutron.ports) == 2
        assert specs(w) == before
    finally:
        stop(w)


def test_a_vanished_port_is_made_again_as_it_was(world: World) -> None:
    pods = world.add(3)
    handler = start(world, pods)
    drive(handler, lambda: world.ported(pods), 10)
    bind(world, pods)
    before = specs(world)
    uid = pods[1]["metadata"]["uid"]
    [old] = world.neutron.ports_for(uid)
    with world.neutron.lock:
        world.neutron._remove(old["id"])                 # an admin deleted it
    handler.resync(set(handler.book.pods))
    [new] = world.neutron.ports_for(uid)
    assert new["id"] != old["id"]
    assert new["fixed_ips"][0]["ip_address"] == old["fixed_ips"][0]["ip_address"]
    assert new["mac_address"] == old["mac_address"]
    before[("ns", "p1")]["portId"] = new["id"]          # re-pointed alone
    assert specs(world) == before
    handler.resync(set(handler.book.pods))                    # and stays so
    assert world.neutron.ports_for(uid) == [new] and specs(world) == before


def test_a_vanished_port_whose_address_is_taken_is_reported(world: World) -> None:
    pods = world.add(2)
    handler = start(world, pods)
    drive(handler, lambda: world.ported(pods), 10)
    bind(world, pods)
    before = specs(world)
    uid = pods[0]["metadata"]["uid"]
    [old] = world.neutron.ports_for(uid)
    with world.neutron.lock:
        world.neutron._remove(old["id"])
        world.neutron._make({"network_id": world.neutron.network_id,
                             "device_id": "someone-else", "fixed_ips": [
                                 {"ip_address": old["fixed_ips"][0]["ip_address"]}]})
    handler.resync(set(handler.book.pods))
    assert world.neutron.ports_for(uid) == []            # nothing else made
    assert specs(world) == before and world.counts.total == 0
    assert Fault.PORT_LOST in world.counts.fault_bits    # type: ignore[attr-defined]
    events = [e for e in world.api.core_events.values()
              if e["involvedObject"]["uid"] == uid]
    assert [e["reason"] for e in events] == ["PortLost"]
    assert events[0]["type"] == "Warning"


def test_a_vanished_port_of_a_pod_not_bound_yet_is_replaced(world: World) -> None:
    """Before the CNI role bound the pod, a PodPort is no proof of a port:
    its port gone, the pod gets a new one and the PodPort says so."""
    pods = world.add(2)
    handler = start(world, pods)
    drive(handler, lambda: world.ported(pods), 10)
    bind(world, pods[1:])
    uid = pods[0]["metadata"]["uid"]
    [old] = world.neutron.ports_for(uid)
    with world.neutron.lock:
        world.neutron._remove(old["id"])
    handler.resync(set(handler.book.pods))
    assert world.ported(pods)
    [new] = world.neutron.ports_for(uid)
    assert world.api.podports[("ns", "p0")]["spec"]["portId"] == new["id"]
    assert world.counts.total == 0


def test_an_empty_port_list_changes_nothing(world: World) -> None:
    """After a Neutron restart, the filtered list answered 200 with no
    port once: nothing deleted, nothing created, nothing re-pointed; one
    GET by id proves the list wrong."""
    pods = world.add(30)
    handler = start(world, pods)
    drive(handler, lambda: world.ported(pods), 10)
    before, ports = specs(world), dict(world.neutron.ports)
    since = time.time()
    world.neutron.faults.empty_lists = 1
    handler.resync(set(handler.book.pods))
    assert world.neutron.ports.keys() == ports.keys() and specs(world) == before
    counts = world.neutron.counts(since)
    assert counts == {"GET /v2.0/ports": 1, "GET /v2.0/ports/{id}": 1}, counts
    handler.resync(set(handler.book.pods))                   # a true list again
    assert world.ported(pods) and specs(world) == before


def test_sweep_without_tag_filtering_deletes_nothing_unproven(world: World) -> None:
    pods = world.add(2)
    handler = start(world, pods)
    drive(handler, lambda: world.ported(pods), 10)
    tag = f"kuryr-supervisor:{world.api.namespaces['kube-system']}"
    other = world.neutron.add_foreign_port(device_id="theirs",
                                           tags=["kuryr-supervisor:other"])
    untagged = world.neutron.add_foreign_port(device_id="untagged", tags=[])
    leaked = world.neutron.add_foreign_port(device_id="gone-pod", tags=[tag])
    world.neutron.faults.ignore_tag_filters = True
    handler.resync(set(handler.book.pods))
    for port in (other, untagged, leaked):
        assert port["id"] in world.neutron.ports
    assert Fault.SWEEP_UNPROVEN in world.counts.fault_bits  # type: ignore[attr-defined]
    late = world.add(1, "late")
    handler.upsert(cluster_pod(late[0]))
    drive(handler, lambda: world.ported(pods + late), 10)   # creating works
    assert other["id"] in world.neutron.ports and untagged["id"] in world.neutron.ports
    world.neutron.faults.ignore_tag_filters = False
    handler.resync(set(handler.book.pods))                    # proven: ours only
    assert leaked["id"] not in world.neutron.ports
    assert other["id"] in world.neutron.ports and untagged["id"] in world.neutron.ports
    assert Fault.SWEEP_UNPROVEN not in world.counts.fault_bits  # type: ignore[attr-defined]


def test_a_full_subnet_is_not_the_handlers_fault(tmp_path: Path) -> None:
    w = make_world(tmp_path, cidr="10.30.0.0/28")        # 13 addresses
    try:
        pods = w.add(16)
        handler = start(w, pods)
        drive(handler, lambda: len(w.api.podports) == 13, 10)
        waiting = [p for p in pods if (p["metadata"]["namespace"],
                                       p["metadata"]["name"]) not in w.api.podports]
        assert len(waiting) == 3 and len(w.neutron.ports) == 13
        assert w.counts.total == 0
        assert Fault.SUBNET_FULL in w.counts.fault_bits  # type: ignore[attr-defined]
        assert handler.retries.pending == {p["metadata"]["uid"] for p in waiting}
        reasons = sorted((e["involvedObject"]["name"], e["reason"])
                         for e in w.api.core_events.values())
        assert reasons == sorted((p["metadata"]["name"], "PortSubnetFull")
                                 for p in waiting)
        # addresses come back: the pods get theirs, the fault clears
        for pod in [p for p in pods if p not in waiting][:3]:
            handler.delete(cluster_pod(pod))
            w.api.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
        handler.retries.at = 0.0
        drive(handler, lambda: w.ported(waiting), 10)
        assert Fault.SUBNET_FULL not in w.counts.fault_bits  # type: ignore[attr-defined]
        assert w.counts.total == 0
    finally:
        stop(w)


def test_port_status_reaches_the_podport(tmp_path: Path) -> None:
    """Ports as Neutron wants them (bound to the pod's node, device_id the
    pod's UID, the cluster tag) and their status in the PodPort: nothing
    while DOWN (a PodPort that says nothing says DOWN: not written), ACTIVE
    from the poll once Neutron says so; a port that failed to bind is
    BINDING_FAILED with a Warning Event on the pod."""
    w = make_world(tmp_path, port_status_interval=0.1)
    try:
        w.neutron.faults.bind = "DOWN"                  # no agent yet
        pods = w.add(3)
        handler = start(w, pods)
        drive(handler, lambda: w.ported(pods), 10)
        tag = f"kuryr-supervisor:{w.api.namespaces['kube-system']}"
        for pod in pods:
            [port] = w.neutron.ports_for(pod["metadata"]["uid"])
            assert port["binding:host_id"] == "node-a"
            assert port["device_owner"] == "compute:kuryr" and port["tags"] == [tag]
        handler.resync(set(handler.book.pods))

        def said(name: str) -> str:
            return str((w.api.podports[("ns", name)].get("status") or {})
                       .get("portStatus", ""))
        assert [said(f"p{i}") for i in range(3)] == [""] * 3
        uid = pods[0]["metadata"]["uid"]
        w.neutron.ports_for(uid)[0]["status"] = "ACTIVE"       # Neutron's
        w.neutron.ports_for(pods[1]["metadata"]["uid"])[0][
            "binding:vif_type"] = "binding_failed"
        drive(handler, lambda: said("p0") == "ACTIVE" and
              said("p1") == "BINDING_FAILED", 5)
        assert said("p2") == ""
        events = [e["reason"] for e in w.api.core_events.values()
                  if e["involvedObject"]["name"] == "p1"]
        assert events == ["PortBindingFailed"]
        spec = specs(w)
        handler.resync(set(handler.book.pods))            # nothing more to write
        assert specs(w) == spec and w.counts.total == 0
        # a restart reads what the PodPorts say: it writes nothing
        writes = w.writes()
        second = w.handler()
        w.start(second)
        assert w.writes() == writes
    finally:
        stop(w)


def test_a_slow_status_poll_never_holds_up_a_pods_port(tmp_path: Path) -> None:
    """The status poll asks Neutron in a thread of its own: while its GETs
    wait (a Neutron busy with a burst), a pod that arrives gets its port
    and PodPort, and once Neutron answers the status still reaches the
    PodPort. (Asked in the handler's thread, the round held the tick, and
    with it every pod behind it, until Neutron answered.)"""
    w = make_world(tmp_path, port_status_interval=0.1, openstack_timeout=10.0)
    faults = w.neutron.faults
    release = threading.Timer(5.0, faults.port_gets.set)
    try:
        faults.bind = "DOWN"                # statuses to poll for
        early = w.add(2)
        handler = start(w, early)
        drive(handler, lambda: w.ported(early), 10)
        time.sleep(0.15)                    # the next round is due
        faults.port_gets.clear()            # Neutron leaves the GETs waiting
        release.start()                     # (for the old way: its tick returns)
        handler.tick()                      # the round starts, asking
        wait_until(lambda: faults.held_gets > 0, 3)
        late = [w.api.add_pod("ns", "late", "node-a")]
        arrive(handler, late)
        assert w.ported(late)
        assert not faults.port_gets.is_set(), \
            "the pod's PodPort waited for the status poll's GET"
        assert faults.held_gets > 0
        w.neutron.ports_for(early[0]["metadata"]["uid"])[0]["status"] = "ACTIVE"
        faults.port_gets.set()
        drive(handler, lambda: (w.api.podports[("ns", "p0")].get("status")
                                or {}).get("portStatus") == "ACTIVE", 5)
    finally:
        release.cancel()
        faults.port_gets.set()
        stop(w)


def test_ports_made_unbound_when_policy_refuses_binding(tmp_path: Path) -> None:
    """A controller user without a role that may set binding:host_id: the
    ports are made without it (said once), nothing is counted."""
    w = make_world(tmp_path)
    try:
        w.neutron.keystone.roles = ["member"]
        pods = w.add(4)
        handler = start(w, pods)
        handler.retries.at = 0.0
        drive(handler, lambda: w.ported(pods), 10)
        assert not handler.maker.modes.bind and w.counts.total == 0
        assert all(p["binding:host_id"] == "" for p in w.neutron.ports.values())
    finally:
        stop(w)
