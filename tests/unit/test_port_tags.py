"""A Neutron without ML2's ``tag_ports_during_bulk_creation`` (Neutron's
and devstack's defaults): a create's tags are dropped, so each port made,
a pod's or a pool's, is tagged right after its create through the tags
API; a port whose tag call was lost is still known as ours by what the
create gave it (its name carries the cluster id, its ``device_owner``
and ``device_id``), tagged and adopted, never doubled and never swept
unless proven ours; readiness says which way tags are set. In this
process, against the fakes."""
from __future__ import annotations

import threading
from pathlib import Path

from kuryr_supervisor.health.checks.controller import NeutronPortsCheck
from tests.unit import test_portpool as pool_base
from tests.unit.test_neutronport import World
from tests.unit.test_port_refusals import Faults
from tests.unit.test_port_retry_safety import drive, make_world, start, stop
from tests.unit.test_portpool import free, running, wait_for

#: The pool tests' fixtures.
world, stopping = pool_base.world, pool_base.stopping


def cluster_tag(w: World) -> str:
    return f"kuryr-supervisor:{w.api.namespaces['kube-system']}"


def test_each_port_is_tagged_after_its_create(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    try:
        w.neutron.drop_create_tags = True
        pods = w.add(12)
        handler = start(w, pods)
        drive(handler, lambda: w.ported(pods), 10)
        assert len(w.neutron.ports) == 12
        assert all(p["tags"] == [cluster_tag(w)]
                   for p in w.neutron.ports.values())
        assert w.counts.total == 0
        counts = w.counts
        check = NeutronPortsCheck(Faults(counts.fault_bits,  # type: ignore[attr-defined]
                                         counts.mode_bits),  # type: ignore[attr-defined]
                                  w.conf)  # type: ignore[arg-type]
        result = check.run(0.0)
        assert result.ok and "tags API" in result.message, result.message
    finally:
        stop(w)


def test_a_port_whose_tag_call_was_lost_is_adopted_not_doubled(
        tmp_path: Path) -> None:
    w = make_world(tmp_path)
    try:
        w.neutron.drop_create_tags = True
        w.neutron.fail_tag_calls = 1
        foreign = w.neutron.add_foreign_port(device_id="someone", tags=[])
        pods = w.add(3)
        handler = start(w, pods)
        drive(handler, lambda: len(w.api.podports) == 3, 10)
        untagged = [p for p in w.neutron.ports.values()
                    if p["device_owner"] == "compute:kuryr" and not p["tags"]
                    and p["id"] != foreign["id"]]
        assert len(untagged) == 1                 # its tag call was lost
        again = start(w, [])                      # a restart
        again.resync(set(again.book.pods))
        assert w.ported(pods), "not adopted"
        assert len(w.neutron.ports) == 4          # 3 + the foreign one
        assert all(cluster_tag(w) in w.neutron.ports[p["id"]]["tags"]
                   for p in untagged)
        assert foreign["id"] in w.neutron.ports   # not ours: kept
        assert w.neutron.ports[foreign["id"]]["tags"] == []
        assert w.counts.total == 0
    finally:
        stop(w)


def test_pool_ports_are_tagged_and_kept(
        world: World, stopping: threading.Event) -> None:
    world.neutron.drop_create_tags = True
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 20)
    pool = [p for p in world.neutron.ports.values()
            if p["device_id"] == "kuryr-supervisor-pool"]
    assert len(pool) == 20
    assert all(sorted(p["tags"]) == sorted([cluster_tag(world),
                                            "kuryr-supervisor-pool"])
               for p in pool)
    assert world.neutron.counts().get("DELETE /v2.0/ports/{id}", 0) == 0
