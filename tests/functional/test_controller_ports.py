"""The controller role's port faults, as a real daemon against the fakes:
a full pod subnet makes it not ready naming the subnet, live, with a
Warning Event on each waiting pod and the fault in ``/metrics``; a
Neutron that ignores tag filters leaves the sweep off, said in
``/status`` and ``/metrics``, while pods still get their ports.

Fake only: a pod subnet of 13 addresses made for the test (the real cloud's
one subnet is shared by the session) and a Neutron that ignores tag
filters (a fault no real Neutron shows on demand)."""
from __future__ import annotations

import time
from pathlib import Path

from tests.fixtures.controller import controller_daemon, start_cloud
from tests.fixtures.daemon import wait_until


def test_full_subnet_not_ready_named_but_alive(tmp_path: Path) -> None:
    cloud = start_cloud(cidr="10.31.0.0/28", gateway="10.31.0.1")   # 13 addresses
    d = controller_daemon(tmp_path, cloud)
    try:
        d.start()
        d.wait_ready()
        pods = [cloud.api.add_pod("default", f"p{i}", "node-a") for i in range(15)]
        wait_until(lambda: len(cloud.api.podports) == 13, 20)
        code, body = wait_until(lambda: (lambda r: r if r[0] != 200 else None)(
            d.get("/ready?verbose")), 10)
        subnet = cloud.neutron.subnet["id"]
        assert f"[-]neutron-ports failed: pod subnet {subnet} has no free address" \
            in body, body
        waiting = {p["metadata"]["name"] for p in pods
                   if ("default", p["metadata"]["name"]) not in cloud.api.podports}
        wait_until(lambda: {e["involvedObject"]["name"] for e in
                            cloud.api.core_events.values()
                            if e["reason"] == "PortSubnetFull"} == waiting, 10)
        for _ in range(10):                  # live throughout, nothing counted
            assert d.probe("/alive") == 200
            time.sleep(0.3)
        assert d.status()["handlerFailures"] == 0
        assert 'kuryr_supervisor_fault{fault="subnet_full"} 1.0' in d.get("/metrics")[1]
        # an address comes back: the waiting pods get theirs, ready again
        ported = next(p for p in pods if p["metadata"]["name"] not in waiting)
        cloud.api.delete_pod("default", ported["metadata"]["name"])
        cloud.api.delete_pod("default", sorted(waiting)[0])
        wait_until(lambda: len(cloud.api.podports) == 13, 40)
        d.wait_ready(20)
    finally:
        d.close()
        cloud.stop()


def test_sweep_off_when_neutron_ignores_tag_filters(tmp_path: Path) -> None:
    cloud = start_cloud()
    cloud.neutron.faults.ignore_tag_filters = True
    other = cloud.neutron.add_foreign_port(device_id="theirs",
                                           tags=["kuryr-supervisor:other"])
    untagged = cloud.neutron.add_foreign_port(device_id="untagged", tags=[])
    d = controller_daemon(tmp_path, cloud)
    try:
        d.start()
        d.wait_ready()
        cloud.api.add_pod("default", "web", "node-a")
        wait_until(lambda: cloud.podport("default", "web"), 10)
        time.sleep(4.5)                      # two resyncs (resync_interval 2 s)
        assert other["id"] in cloud.neutron.ports
        assert untagged["id"] in cloud.neutron.ports
        check = d.status()["checks"]["neutron-ports"]
        assert "the port sweep is off" in check["message"], check
        assert d.probe("/ready") == 200      # ports are still made
        assert 'kuryr_supervisor_fault{fault="sweep_unproven"} 1.0' in \
            d.get("/metrics")[1]
    finally:
        d.close()
        cloud.stop()
