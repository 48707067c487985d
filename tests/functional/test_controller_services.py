"""The controller daemon with the ``services`` handler against the fakes
(the Kubernetes API, Keystone, Neutron and Octavia): its handler process
makes a Service's load balancer, its readiness names ``octavia`` while
Octavia is down (liveness stays 200) and clears once it is back, and the
Service made meanwhile gets its load balancer. The same on the real OVN
stack, with traffic: tests/functional/test_ovn_services.py."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.clouds import controller_options
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.lbclouds import LbCloud

SERVICES = "kuryr-supervisor:services"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def test_services_and_an_octavia_outage(tmp_path: Path, api: FakeAPI,
                                        fake_octavia: LbCloud) -> None:
    fake = fake_octavia.fake
    assert fake is not None
    lbs = fake_octavia.api(tmp_path)
    tag = f"kuryr-supervisor:{api.namespaces['kube-system']}"
    d = Daemon(tmp_path, controller_options(
        fake_octavia.cloud, api.url,
        controller={"handlers": "neutron_port,services"},
        services={"service_subnet_id": fake_octavia.service_subnet_id,
                  "resync_interval": 5.0}))
    d.start()
    try:
        d.wait_ready(30)
        code, body = d.get("/ready?verbose")
        assert code == 200 and "[+]octavia ok" in body, body
        api.add_service("default", "web", "10.96.0.10", ports=[
            {"name": "http", "protocol": "TCP", "port": 80}])
        wait_until(lambda: [lb.vip for lb in lbs.load_balancers(
            tags=[tag, SERVICES])] == ["10.96.0.10"], 30)

        fake.down()
        api.add_service("default", "late", "10.96.0.11", ports=[
            {"name": "http", "protocol": "TCP", "port": 80}])
        wait_until(lambda: "[-]octavia" in d.get("/ready?verbose")[1], 30)
        assert d.probe("/alive") == 200
        # the port handler, a process of its own, still makes ports
        api.add_pod("default", "p1", "node-a")
        wait_until(lambda: ("default", "p1") in api.podports, 30)
        fake.up()
        d.wait_ready(30)
        wait_until(lambda: sorted(lb.vip for lb in lbs.load_balancers(
            tags=[tag, SERVICES])) == ["10.96.0.10", "10.96.0.11"], 30)
        assert "Traceback" not in d.log()
    finally:
        d.close()
