"""A bound pod's port that vanished (an admin deleted it) comes back as it
was and where the pod runs: the same address and MAC, bound to the pod's
node, and the pod's PodPort names the new port (its address and MAC
unchanged, its status kept), so the node re-points the pod's interface
to it; a Normal Event on the pod says so. In this process, against the
Kubernetes API fake and the Neutron fake."""
from __future__ import annotations

from pathlib import Path

from tests.unit.test_port_retry_safety import bind, drive, make_world, start, stop


def test_a_vanished_bound_port_comes_back_bound_and_named(
        tmp_path: Path) -> None:
    w = make_world(tmp_path)
    try:
        pods = [w.api.add_pod("ns", f"p{i}", f"node-{i}") for i in range(3)]
        handler = start(w, pods)
        drive(handler, lambda: w.ported(pods), 10)
        bind(w, pods)
        pod = pods[2]
        uid = pod["metadata"]["uid"]
        before = dict(w.api.podports[("ns", "p2")])
        [old] = w.neutron.ports_for(uid)
        with w.neutron.lock:
            w.neutron._remove(old["id"])                 # an admin deleted it
        handler.resync(set(handler.book.pods))
        [new] = w.neutron.ports_for(uid)
        assert new["id"] != old["id"]
        assert new["binding:host_id"] == "node-2", "made unbound"
        assert new["fixed_ips"] == old["fixed_ips"]
        assert new["mac_address"] == old["mac_address"]
        assert new["tags"] == old["tags"] and new["name"] == old["name"]
        after = w.api.podports[("ns", "p2")]
        assert after["spec"] == {**before["spec"], "portId": new["id"]}
        assert after["status"]["boundAt"] == before["status"]["boundAt"]
        assert w.ported(pods) and w.counts.total == 0
        reasons = [e["reason"] for e in w.api.core_events.values()
                   if e["involvedObject"]["uid"] == uid]
        assert reasons == ["PortRecreated"]
        handler.resync(set(handler.book.pods))           # settled: no more
        assert w.neutron.ports_for(uid) == [new]
        assert w.api.podports[("ns", "p2")]["spec"]["portId"] == new["id"]
    finally:
        stop(w)
