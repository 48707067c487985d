"""The controller daemon with the ``services`` handler against the fakes
(the Kubernetes API, Keystone, Neutron and Octavia): its handler process
makes a Service's load balancer, its readiness names ``octavia`` while
Octavia is down (liveness stays 200) and clears once it is back, and the
Service made meanwhile gets its load balancer. The same on the real OVN
stack, with traffic: tests/functional/test_ovn_services.py."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.clouds import controller_options
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.lbclouds import LbCloud

SERVICES = "kuryr-supervisor:services"


def until(d: Daemon, what: str, check: Callable[[], object],
          timeout: float = 60.0) -> None:
    """Wait for ``check``; a timeout names ``what``, with the log."""
    try:
        wait_until(check, timeout)
    except TimeoutError:
        raise AssertionError(f"{what} not within {timeout:.0f} s:\n"
                             f"{d.log()}") from None


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
        d.wait_ready(60)
        code, body = d.get("/ready?verbose")
        assert code == 200 and "[+]octavia ok" in body, body
        api.add_service("default", "web", "10.96.0.10", ports=[
            {"name": "http", "protocol": "TCP", "port": 80}])
        until(d, "the load balancer", lambda: [
            lb.vip for lb in lbs.load_balancers(tags=[tag, SERVICES])]
            == ["10.96.0.10"])

        fake.down()
        api.add_service("default", "late", "10.96.0.11", ports=[
            {"name": "http", "protocol": "TCP", "port": 80}])
        until(d, "readiness naming octavia",
              lambda: "[-]octavia" in d.get("/ready?verbose")[1])
        assert d.probe("/alive") == 200
        # the port handler, a process of its own, still makes ports
        api.add_pod("default", "p1", "node-a")
        until(d, "the pod's PodPort", lambda: ("default", "p1")
              in api.podports)
        fake.up()
        d.wait_ready(60)
        until(d, "the load balancer made meanwhile", lambda: sorted(
            lb.vip for lb in lbs.load_balancers(tags=[tag, SERVICES]))
            == ["10.96.0.10", "10.96.0.11"])
        text = d.log()
        assert "Traceback" not in text and " ERROR " not in text
    finally:
        d.close()
