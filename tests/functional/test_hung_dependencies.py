"""A hung dependency makes a real CNI daemon not ready, naming it, and
never costs it its liveness or a worker.

Each dependency accepts connections and never answers: ovsdb-server stopped
with SIGSTOP (the private OVS), the fake Kubernetes API held
(:meth:`FakeAPI.hang`), the fake Keystone or Neutron made to wait 30 s per
request. The daemon runs with the test defaults (heartbeat deadlines of
2 s, checks every 0.2 s), so a check that waited in the HealthManager's
loop for its dependency would make the HealthManager stale at once.

For each: ``/ready`` names the dependency within its check's deadline plus
one check period (plus scheduling slack on a shared machine), ``/alive``
answers 200 on every poll throughout, no worker restarts (the same pids,
no restart counted), and readiness comes back once it answers again.
"""
from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.controller import Cloud, subnet_cloud_fixture
from tests.fixtures.daemon import Daemon
from tests.fixtures.openstack import FakeKeystone, FakeNeutron
from tests.fixtures.ovs import PrivateOVS
from tests.functional.ovs_harness import NODE, cni_daemon, ovs_fixture

pytestmark = pytest.mark.privileged

cloud = pytest.fixture(subnet_cloud_fixture)
ovs = pytest.fixture(ovs_fixture)

#: Seconds a dependency is held hung while liveness is watched: several
#: times every heartbeat deadline of the test daemon (2 s).
HOLD = 8.0
#: Scheduling slack on a shared machine, on top of deadline + period.
SLACK = 1.5


def restarts(d: Daemon) -> dict[str, int]:
    comps = json.loads(d.get("/status")[1])["components"]
    return {name: int(c["restarts"]) for name, c in comps.items()}


def hung_until_named(d: Daemon, check: str, words: str, bound: float,
                     resume: Callable[[], None]) -> float:
    """With the dependency just hung: seconds until ``/ready/<check>``
    fails with ``words``; then ``HOLD`` seconds more. ``/alive`` must
    answer 200 on every poll, and no worker may restart. ``resume`` ends
    the hang; readiness must come back."""
    pids, began = d.worker_pids(), time.monotonic()
    named: float | None = None
    body = ""
    try:
        while time.monotonic() - began < bound + HOLD:
            assert d.probe("/alive") == 200, d.get("/alive?verbose")
            if named is None:
                code, body = d.get(f"/ready/{check}")
                if code != 200 and words in body:
                    named = time.monotonic() - began
            time.sleep(0.1)
        code, verbose = d.get("/ready?verbose")
        assert code != 200 and f"[-]{check} failed" in verbose, verbose
    finally:
        resume()
    print(f"{check}: not ready, named, {named} s after the hang "
          f"(bound {bound:g} s): {body.strip()}")
    assert named is not None and named <= bound, (named, body)
    assert d.worker_pids() == pids
    assert set(restarts(d).values()) == {0}, restarts(d)
    d.wait_ready(30)
    return named


def test_hung_ovsdb_server(tmp_path: Path, cloud: Cloud,
                           ovs: PrivateOVS) -> None:
    """SIGSTOP on ovsdb-server: its socket still accepts."""
    bridge = "ksvh" + secrets.token_hex(4)
    ovs.add_bridge(bridge)
    cloud.api.add_node(NODE)
    d = cni_daemon(tmp_path, cloud, ovs, bridge)
    try:
        d.start()
        d.wait_ready(30)
        opts = d.options
        bound = (float(opts["binding"]["ovsdb_timeout"])
                 + float(opts["health"]["check_interval"]) + SLACK)
        ovs.stop_db()
        hung_until_named(d, "ovsdb", "answer within", bound,
                         ovs.continue_db)
    finally:
        ovs.continue_db()
        d.close()


def test_hung_kubernetes_api(tmp_path: Path, cloud: Cloud) -> None:
    cloud.api.add_node(NODE)
    d = Daemon(tmp_path, {"kubernetes": {
        "api_root": cloud.api.url, "node_name": NODE,
        "request_timeout": 1.0, "watch_timeout": 5,
        "api_check_interval": 0.2, "api_check_timeout": 1.0}})
    try:
        d.start()
        d.wait_ready(30)
        bound = (float(d.options["kubernetes"]["api_check_timeout"])
                 + float(d.options["health"]["check_interval"]) + SLACK)
        cloud.api.hang()
        hung_until_named(d, "k8s-api", "k8s-api", bound, cloud.api.answer)
    finally:
        cloud.api.answer()
        d.close()


@pytest.mark.parametrize("which", ["keystone", "neutron"])
def test_hung_keystone_or_neutron(tmp_path: Path, which: str) -> None:
    """The CNI role with ``[controller] openstack_checks`` (nested
    deployments): each OpenStack service is a readiness check. Tokens live
    4 s, so Keystone is asked again (renewal) every 2 s at most."""
    keystone = FakeKeystone(token_lifetime=4.0).start()
    neutron = FakeNeutron(keystone).start()
    service: Any = keystone if which == "keystone" else neutron
    d = Daemon(tmp_path, {
        "controller": {"openstack_checks": True, "openstack_timeout": 1.0,
                       "openstack_check_interval": 0.2},
        "neutron": keystone.conf_overrides()})
    try:
        d.start()
        d.wait_ready(30)
        bound = (2.0 + 1.0 + float(d.options["health"]["check_interval"])
                 + SLACK)
        service.hang = 30.0

        def resume() -> None:
            service.hang = 0.0
        hung_until_named(d, which, "no answer within", bound, resume)
    finally:
        service.hang = 0.0
        d.close()
        neutron.stop()
        keystone.stop()
