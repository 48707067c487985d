"""Idempotent creates: a pod's port asks for a MAC address derived from the
pod's UID (a locally administered unicast OUI), and Neutron refuses a
second port with that MAC on the network (409 ``MacAddressInUse``), so a
second create for the same pod is refused and the port the first made is
adopted: no duplicate even when an earlier process's create commits late,
and no hold to wait out. A MAC another pod's or a foreign port holds is a
collision: the pod's next derivation is asked for. Where Neutron's policy
refuses ``mac_address`` the controller behaves as before (ports get
Neutron's MACs, lost creates are waited for), and readiness says which.
In this process, against the fakes."""
from __future__ import annotations

import time
from pathlib import Path

from kuryr_supervisor.health.checks.controller import NeutronPortsCheck
from kuryr_supervisor.kubernetes.clusterpods import cluster_pod
from tests.unit.test_port_refusals import Faults
from tests.unit.test_port_retry_safety import (
    DuplicateWatch,
    drive,
    make_world,
    start,
    stop,
)

#: The OUI of derived MACs: locally administered (bit 1), unicast (bit 0).
OUI = "0e:6b:73:"


def test_a_create_committed_late_by_an_earlier_process_is_adopted(
        tmp_path: Path) -> None:
    """A process sends a create and dies; Neutron commits it seconds
    later, after the next process sent its own create for the same pods:
    Neutron refuses the later one, whichever comes second, and every pod
    keeps one port, never two."""
    w = make_world(tmp_path, port_create_timeout_per_port=0.1)
    try:
        w.neutron.faults.port_latency = (1.0, 1.0)        # 3 ports: 3 s
        pods = w.add(3)
        with DuplicateWatch(w.neutron) as dups:
            first = start(w, pods)                        # times out: dies
            assert first.retries.pending and not w.neutron.ports
            time.sleep(0.3)
            second = start(w, [])                         # no hold known
            started = time.monotonic()
            drive(second, lambda: w.ported(pods), 20)
            took = time.monotonic() - started
            time.sleep(3.5)             # both creates worked on to the end
        assert dups.most == 1, "a pod had two ports"
        assert len(w.neutron.ports) == 3 and w.counts.total == 0
        assert all(p["mac_address"].startswith(OUI)
                   for p in w.neutron.ports.values())
        assert took < 10, f"waited {took:.1f} s"
    finally:
        stop(w)


def test_a_lost_create_is_sent_again_at_once(tmp_path: Path) -> None:
    """Its own create timed out: with derived MACs it is sent again at
    the next retry (the later of the two is refused), not held for three
    of its timeouts."""
    w = make_world(tmp_path, port_create_timeout_per_port=0.1)
    try:
        w.neutron.faults.port_latency = (4.0, 4.0)     # commits after 4 s
        pods = w.add(1)
        with DuplicateWatch(w.neutron) as dups:
            handler = start(w, pods)                   # 1.1 s timeout
            w.neutron.faults.port_latency = (0.0, 0.0)
            started = time.monotonic()
            drive(handler, lambda: w.ported(pods), 20)
            took = time.monotonic() - started
            time.sleep(max(0.0, 3.5 - took))           # the first commits
        assert dups.most == 1 and len(w.neutron.ports) == 1
        assert took < 1.5, f"held {took:.1f} s"
        assert w.counts.total == 0
    finally:
        stop(w)


def test_a_mac_collision_takes_the_next_derivation(tmp_path: Path) -> None:
    from kuryr_supervisor.controller.openstack import making
    w = make_world(tmp_path)
    try:
        pods = w.add(2)
        uid = pods[0]["metadata"]["uid"]
        taken = making.derived_mac(uid, 0)
        foreign = w.neutron.add_foreign_port(device_id="someone", tags=[],
                                             mac=taken)
        handler = start(w, pods)
        drive(handler, lambda: w.ported(pods), 10)
        [port] = w.neutron.ports_for(uid)
        assert port["mac_address"] == making.derived_mac(uid, 1)
        assert port["mac_address"].startswith(OUI)
        assert w.neutron.ports[foreign["id"]]["mac_address"] == taken
        assert w.counts.total == 0
    finally:
        stop(w)


def test_where_policy_refuses_macs_ports_are_made_as_before(
        tmp_path: Path) -> None:
    w = make_world(tmp_path)
    try:
        w.neutron.refuse_macs = True
        pods = w.add(4)
        handler = start(w, pods)
        for pod in pods:
            handler.upsert(cluster_pod(pod))
        drive(handler, lambda: w.ported(pods), 10)
        assert all(p["mac_address"].startswith("fa:16:3e:")
                   for p in w.neutron.ports.values())
        assert w.counts.total == 0
        counts = w.counts
        result = NeutronPortsCheck(Faults(counts.fault_bits,  # type: ignore[attr-defined]
                                          counts.mode_bits),  # type: ignore[attr-defined]
                                   w.conf).run(0.0)  # type: ignore[arg-type]
        assert result.ok and "MAC" in result.message, result.message
    finally:
        stop(w)
