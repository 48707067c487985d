"""Finished pods give their ports back, in a real controller daemon against
the Kubernetes API fake and the Keystone and Neutron fakes, in a project
whose port quota is 4: four Jobs' pods hold the four ports and the next
pod gets none until they finish; then their ports and PodPorts go and it
gets one. The same when the pods finished while no controller ran: the
next one's first list releases them, each once. Neither logs an error.

The real cloud: tests/functional/test_controller_realcloud.py."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.controller import Cloud, controller_daemon, start_cloud
from tests.fixtures.daemon import Daemon, wait_until
from tests.functional.test_quiet_log import loud_lines

PODPORTS = "/apis/kuryr-supervisor.openstack.org/v1/namespaces/default/podports/"


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    c = start_cloud(port_limit=4)
    yield c
    c.stop()


def jobs(cloud: Cloud, d: Daemon) -> list[dict[str, Any]]:
    """Four pods that take the project's four ports."""
    pods = [cloud.api.add_pod("default", f"job-{i}", "node-a")
            for i in range(4)]
    wait_until(lambda: all(cloud.podport("default", p["metadata"]["name"])
                           for p in pods), 20)
    assert len(cloud.neutron.ports) == 4
    return pods


def finish(cloud: Cloud, pods: list[dict[str, Any]]) -> None:
    for i, pod in enumerate(pods):
        cloud.api.set_phase("default", pod["metadata"]["name"],
                            ("Succeeded", "Failed")[i % 2])


def released(cloud: Cloud, pods: list[dict[str, Any]]) -> bool:
    return not any(cloud.neutron.ports_for(p["metadata"]["uid"]) or
                   cloud.podport("default", p["metadata"]["name"])
                   for p in pods)


def podport_deletes(cloud: Cloud) -> int:
    return sum(1 for _, m, p, _ in list(cloud.api.requests)
               if m == "DELETE" and p.startswith(PODPORTS))


def test_finished_pods_give_their_ports_back(tmp_path: Path,
                                             cloud: Cloud) -> None:
    d = controller_daemon(tmp_path, cloud)
    try:
        d.start()
        d.wait_ready()
        done = jobs(cloud, d)
        posts = cloud.neutron.counts()["POST /v2.0/ports"]
        cloud.api.add_pod("default", "next", "node-a")
        # Its create is refused: the quota is used up.
        wait_until(lambda: cloud.neutron.counts()["POST /v2.0/ports"] > posts,
                   20)
        assert cloud.podport("default", "next") is None
        finish(cloud, done)
        spec = wait_until(lambda: cloud.podport("default", "next"), 30)
        wait_until(lambda: released(cloud, done), 10)
        [port] = cloud.neutron.ports.values()
        assert spec["portId"] == port["id"]
        assert cloud.neutron.counts()["DELETE /v2.0/ports/{id}"] == 4
        assert podport_deletes(cloud) == 4
        assert d.status()["handlerFailures"] == 0
        assert loud_lines(d) == []
    finally:
        d.close()


def test_a_restart_releases_what_finished_pods_hold(tmp_path: Path,
                                                    cloud: Cloud) -> None:
    first = controller_daemon(tmp_path / "a", cloud)
    try:
        first.start()
        first.wait_ready()
        done = jobs(cloud, first)
    finally:
        first.close()
    finish(cloud, done)                 # while no controller runs
    cloud.api.add_pod("default", "next", "node-a")
    again = controller_daemon(tmp_path / "b", cloud)
    try:
        again.start()
        spec = wait_until(lambda: cloud.podport("default", "next"), 30)
        wait_until(lambda: released(cloud, done), 10)
        [port] = cloud.neutron.ports.values()
        assert spec["portId"] == port["id"]
        # Each released once, through two more resyncs (2 s apart).
        lists = cloud.neutron.counts()["GET /v2.0/ports"]
        wait_until(lambda: cloud.neutron.counts()["GET /v2.0/ports"]
                   >= lists + 2, 20)
        assert cloud.neutron.counts()["DELETE /v2.0/ports/{id}"] == 4
        assert podport_deletes(cloud) == 4
        assert again.status()["handlerFailures"] == 0
        assert loud_lines(first) == [] and loud_lines(again) == []
    finally:
        again.close()
