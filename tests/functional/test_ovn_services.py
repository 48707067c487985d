"""Kubernetes Services as Octavia load balancers, on the real OVN stack:
the controller daemon's ``services`` handler against a real Octavia with
the OVN provider (``ovn_octavia``), Keystone and the ML2/OVN Neutron (in
the catalog for the test's duration), the Kubernetes API a fake the test
writes Services and EndpointSlices into (as the EndpointSlice controller
would); pods plugged by hand on the fixture's pod network
(tests/fixtures/ovn/svcpods.py).

- a Service with two endpoints (pods on node 1 answering TCP and UDP) is
  reached through its VIP from a pod on node 2, both members answering,
  on both protocols; an endpoint removed gets no more traffic, one added
  gets some; a restart of the controller writes nothing (to Octavia, to
  Kubernetes); the Service deleted leaves no load balancer, listener,
  pool, VIP port or NB Load_Balancer;
- a name resolved by a pod on node 2 through a "kube-dns" Service's VIP
  (a DNS server pod on node 1; glibc's resolver, over UDP and TCP), the
  Service it names answering through its VIP;
- the ``kubernetes`` Service, whose endpoint is no pod (an "API server"
  on a subnet of its own behind the same router), answers through its VIP;
- Octavia stopped (its API's processes SIGSTOPped): readiness names
  ``octavia``, liveness stays 200, the port handler still makes pod ports;
  once SIGCONTed, the Service made meanwhile gets its load balancer.

Timings go to stderr (``[octavia]``): a Service's first answer through its
VIP after its creation, an endpoint change until traffic follows.
"""
from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.services.inventory import SERVICES_TAG
from tests.fixtures.clouds import controller_options
from tests.fixtures.daemon import Daemon
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.ovn.dnspod import DnsServer, Resolver
from tests.fixtures.ovn.lb import OvnOctavia, log
from tests.fixtures.ovn.stack import OvnStack, wait_for
from tests.fixtures.ovn.svcpods import Pods, probe
from tests.fixtures.realcloud import RealCloud

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

#: Octavia's access log lines of a write (gunicorn's, in api.log).
WRITE = re.compile(r'"(POST|PUT|DELETE) /v2/lbaas/')


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


@pytest.fixture
def pods(ovn_stack: OvnStack, ovn_octavia: OvnOctavia) -> Iterator[Pods]:
    made = Pods(ovn_stack, ovn_octavia)
    yield made
    made.close()


@pytest.fixture
def catalog(ovn_stack: OvnStack, ovn_octavia: OvnOctavia) -> Iterator[None]:
    """Keystone's ``network`` is the ML2/OVN Neutron meanwhile."""
    with ovn_stack.in_catalog():
        yield


def daemon(tmp_path: Path, cloud: RealCloud, octavia: OvnOctavia,
           api: FakeAPI, handlers: str = "services") -> Daemon:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return Daemon(tmp_path, controller_options(
        cloud, api.url,
        controller={"handlers": handlers,
                    "pod_network_id": octavia.pod_network_id,
                    "pod_subnet_id": octavia.pod_subnet_id},
        services={"service_subnet_id": octavia.service_subnet_id,
                  "resync_interval": 10.0, "settle_timeout": 30.0}))


def lb_api(tmp_path: Path, cloud: RealCloud) -> Any:
    """The adapter's Octavia calls as the controller's user."""
    conf_path = tmp_path / "lb.conf"
    conf_path.write_text("[neutron]\n" + "".join(
        f"{k} = {v}\n" for k, v in cloud.conf_overrides().items()))
    from oslo_config import cfg

    from kuryr_supervisor import conf as conf_mod
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf(["--config-file", str(conf_path)], default_config_files=[])
    return osa.OpenStack.from_conf(conf).octavia()


def ours(lbs: Any, api: FakeAPI) -> list[Any]:
    tag = f"kuryr-supervisor:{api.namespaces['kube-system']}"
    return list(lbs.load_balancers(tags=[tag, SERVICES_TAG]))


def sweep(lbs: Any, api: FakeAPI) -> None:
    """What a failed test left of this cluster's load balancers, deleted
    (the session's Octavia is shared: its VIPs too)."""
    deadline = time.monotonic() + 60
    while (left := ours(lbs, api)) and time.monotonic() < deadline:
        for lb in left:
            if lb.status in ("ACTIVE", "ERROR"):
                try:
                    lbs.delete_load_balancer(lb.id)
                except osa.OpenStackError:
                    pass
        time.sleep(0.5)


def octavia_writes(octavia: OvnOctavia, since: int) -> list[str]:
    """Octavia's writes logged after byte ``since`` of its API's log."""
    assert octavia.octavia is not None
    with open(octavia.octavia.api.log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines() if WRITE.search(line)]


def log_size(octavia: OvnOctavia) -> int:
    assert octavia.octavia is not None
    return os.path.getsize(octavia.octavia.api.log)


def vip(octavia: OvnOctavia) -> str:
    """A free address of the service subnet (not its gateway)."""
    return f"10.43.0.{100 + uuid.uuid4().int % 100}"


def answered(client: Any, proto: str, address: str, port: int,
             wanted: set[str], timeout: float = 60.0) -> set[str]:
    """Who answers through ``address:port`` over probes of 20 answers,
    until all of ``wanted`` did."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while not seen >= wanted and time.monotonic() < deadline:
        seen |= set(probe(client, proto, address, port, 20, 10)) - {""}
    assert seen >= wanted, f"{wanted} through {address}:{port} ({proto}): " \
        f"{seen}"
    return seen


def web(api: FakeAPI, name: str, address: str) -> str:
    svc = api.add_service("default", name, address, ports=[
        {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "http"},
        {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": "dns"}],
        selector={"app": name})
    return str(svc["metadata"]["uid"])


def endpoints(api: FakeAPI, name: str, *addresses: str) -> None:
    api.put_endpointslice("default", f"{name}-x1", name,
                          addresses=list(addresses),
                          ports={"http": 8080, "dns": 5353})


def test_a_service_through_its_vip_follows_its_endpoints(
        tmp_path: Path, real_cloud: RealCloud, ovn_stack: OvnStack,
        ovn_octavia: OvnOctavia, api: FakeAPI, pods: Pods,
        catalog: None) -> None:
    marked = ovn_octavia.mark()     # this test's own lines of the logs
    node1, node2 = ovn_stack.fabric.nodes
    a, b, c = (pods.make(node1, n) for n in "abc")
    client = pods.make(node2)
    lbs = lb_api(tmp_path, real_cloud)
    d = daemon(tmp_path, real_cloud, ovn_octavia, api).start()
    try:
        d.wait_ready(60)
        address = vip(ovn_octavia)
        started = time.monotonic()
        uid = web(api, "web", address)
        endpoints(api, "web", a.address, b.address)
        wait_for(lambda: any(probe(client, "tcp", address, 80, 1, 2)), 60,
                 lambda: f"an answer from {address}:80\n{d.log()[-3000:]}",
                 interval=0)
        first = time.monotonic() - started
        for proto, port in (("tcp", 80), ("udp", 53)):
            assert answered(client, proto, address, port, {"a", "b"}) == \
                {"a", "b"}
        [lb] = ours(lbs, api)
        assert lb.vip == address and lb.name.endswith(uid)
        log(f"Service -> first answer through its VIP in {first:.2f} s")

        # An endpoint out: no more connections to it; one in: it gets
        # some; on both protocols (a pool each: one batch each).
        changed = time.monotonic()
        endpoints(api, "web", a.address)
        for proto, port in (("tcp", 80), ("udp", 53)):
            wait_for(lambda p=proto, n=port: set(probe(
                client, p, address, n, 10, 5)) == {"a"}, 60,
                f"only a behind the VIP ({proto})", interval=0)
            log(f"endpoint removed -> out of the {proto} traffic in "
                f"{time.monotonic() - changed:.2f} s")
        changed = time.monotonic()
        endpoints(api, "web", a.address, c.address)
        for proto, port in (("tcp", 80), ("udp", 53)):
            wait_for(lambda p=proto, n=port: "c" in probe(
                client, p, address, n, 10, 5), 60,
                f"c behind the VIP ({proto})", interval=0)
            log(f"endpoint added -> in the {proto} traffic in "
                f"{time.monotonic() - changed:.2f} s")
        assert set(probe(client, "udp", address, 53, 30, 10)) - {""} == \
            {"a", "c"}

        # A restart writes nothing, to Octavia or to Kubernetes.
        d.close()
        since, k8s_since = log_size(ovn_octavia), time.monotonic()
        d = daemon(tmp_path, real_cloud, ovn_octavia, api).start()
        d.wait_ready(60)
        time.sleep(3.0)
        assert octavia_writes(ovn_octavia, since) == []
        assert [(m, p) for at, m, p, _ in list(api.access)
                if at >= k8s_since and m != "GET"] == []

        # Deleted: nothing left in Octavia, Neutron or OVN's NB.
        api.delete_service("default", "web")
        api.delete_endpointslice("default", "web-x1")
        wait_for(lambda: not ours(lbs, api), 60, "no load balancer left")
        tag = [f"kuryr-supervisor:{api.namespaces['kube-system']}",
               SERVICES_TAG]
        assert lbs.listeners(tags=tag) == [] and lbs.pools(tags=tag) == []
        assert ovn_stack.admin("GET", "/v2.0/ports",
                               name=f"ovn-lb-vip-{lb.id}").expect(200)[
            "ports"] == []
        wait_for(lambda: lb.id not in ovn_octavia.ovn_load_balancers(), 30,
                 "no NB Load_Balancer left")
        assert not any(probe(client, "tcp", address, 80, 1, 1))
        healthy = d.log()
        assert " ERROR " not in healthy and "Traceback" not in healthy
    finally:
        d.close()
        sweep(lbs, api)
    assert ovn_octavia.errors(marked) == []


def test_a_pod_resolves_a_service_by_name_through_kube_dns(
        tmp_path: Path, real_cloud: RealCloud, ovn_stack: OvnStack,
        ovn_octavia: OvnOctavia, api: FakeAPI, pods: Pods,
        catalog: None) -> None:
    """A client pod on node 2 resolves ``web.default.svc.cluster.local``
    with its resolver pointed at kube-dns's ClusterIP, as the kubelet
    points a pod's, over UDP and TCP (the resolver's retry over TCP of a
    truncated answer), and reaches the address it got: the web Service's
    VIP, answered by the web pod. Both Services' members are on node 1."""
    node1, node2 = ovn_stack.fabric.nodes
    dns_pod, server = pods.make(node1), pods.make(node1, "web")
    client = pods.make(node2)
    dns_vip = vip(ovn_octavia)
    web_vip = next(a for a in iter(lambda: vip(ovn_octavia), "")
                   if a != dns_vip)
    name = "web.default.svc.cluster.local"
    dns = DnsServer(dns_pod, {name: web_vip})
    resolver = Resolver(client, dns_pod.address)
    lbs = lb_api(tmp_path, real_cloud)
    d = daemon(tmp_path, real_cloud, ovn_octavia, api)
    try:
        # The server answers the client directly: only the VIP is missing.
        assert resolver.resolve(name) == [web_vip]
        resolver.nameserver = dns_vip
        assert resolver.resolve(name) == []
        api.add_service("kube-system", "kube-dns", dns_vip, ports=[
            {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 53},
            {"name": "dns-tcp", "protocol": "TCP", "port": 53,
             "targetPort": 53}], selector={"k8s-app": "kube-dns"})
        api.put_endpointslice("kube-system", "kube-dns-x1", "kube-dns",
                              addresses=[dns_pod.address],
                              ports={"dns": 53, "dns-tcp": 53})
        web(api, "web", web_vip)
        endpoints(api, "web", server.address)
        d.start()
        d.wait_ready(60)
        for tcp in (False, True):
            wait_for(lambda t=tcp: resolver.resolve(name, tcp=t) == [web_vip],
                     60, lambda t=tcp: f"{name} through {dns_vip} (tcp={t})"
                     f"\n{d.log()[-3000:]}", interval=0.2)
        [address] = resolver.resolve(name)
        wait_for(lambda: "web" in probe(client, "tcp", address, 80, 1, 2),
                 60, f"the web Service through {address}:80", interval=0)
        assert {lb.vip for lb in ours(lbs, api)} == {dns_vip, web_vip}
        api.delete_service("kube-system", "kube-dns")
        api.delete_service("default", "web")
        wait_for(lambda: not ours(lbs, api), 60, "no load balancer left")
        healthy = d.log()
        assert " ERROR " not in healthy and "Traceback" not in healthy
    finally:
        d.close()
        sweep(lbs, api)
        resolver.close()
        dns.close()


def test_the_kubernetes_service_reaches_an_endpoint_that_is_no_pod(
        tmp_path: Path, real_cloud: RealCloud, ovn_stack: OvnStack,
        ovn_octavia: OvnOctavia, api: FakeAPI, pods: Pods,
        catalog: None) -> None:
    """The API servers are on the nodes' subnet, not the pods': their
    members go with that subnet (found among those Neutron shows)."""
    node1, node2 = ovn_stack.fabric.nodes
    net = ovn_stack.admin("POST", "/v2.0/networks", {"network": {
        "name": "apiservers", "project_id": real_cloud.project_id,
        "provider:network_type": "geneve"}}).expect(201)["network"]
    subnet = ovn_stack.admin("POST", "/v2.0/subnets", {"subnet": {
        "name": "apiservers", "network_id": net["id"],
        "project_id": real_cloud.project_id, "ip_version": 4,
        "cidr": "10.44.0.0/24", "gateway_ip": "10.44.0.1",
        "enable_dhcp": False}}).expect(201)["subnet"]
    router = f"/v2.0/routers/{ovn_octavia.router_id}"
    ovn_stack.admin("PUT", f"{router}/add_router_interface",
                    {"subnet_id": subnet["id"]}).expect(200)
    lbs = lb_api(tmp_path, real_cloud)
    d = daemon(tmp_path, real_cloud, ovn_octavia, api)
    try:
        apiserver = pods.make(node1, "apiserver", tcp=6443,
                              network_id=net["id"], gateway="10.44.0.1")
        client = pods.make(node2)
        address = vip(ovn_octavia)
        api.add_service("default", "kubernetes", address, ports=[
            {"name": "https", "protocol": "TCP", "port": 443,
             "targetPort": 6443}])
        api.put_endpointslice("default", "kubernetes", "kubernetes",
                              addresses=[apiserver.address],
                              ports={"https": 6443})
        d.start()
        d.wait_ready(60)
        wait_for(lambda: "apiserver" in probe(client, "tcp", address, 443,
                                              1, 2), 60,
                 lambda: f"the API server through {address}:443\n"
                 f"{d.log()[-3000:]}", interval=0)
        [lb] = ours(lbs, api)
        member = [p for p in lbs.pools(lb_id=lb.id)]
        assert len(member) == 1
        api.delete_service("default", "kubernetes")
        wait_for(lambda: not ours(lbs, api), 60, "no load balancer left")
    finally:
        d.close()
        sweep(lbs, api)
        pods.close()
        pods.made.clear()
        ovn_stack.admin("PUT", f"{router}/remove_router_interface",
                        {"subnet_id": subnet["id"]})
        ovn_stack.admin("DELETE", f"/v2.0/networks/{net['id']}")


def test_octavia_stopped_names_it_and_ports_still_flow(
        tmp_path: Path, real_cloud: RealCloud, ovn_stack: OvnStack,
        ovn_octavia: OvnOctavia, api: FakeAPI, pods: Pods,
        catalog: None) -> None:
    node1, node2 = ovn_stack.fabric.nodes
    member = pods.make(node1, "m")
    client = pods.make(node2)
    lbs = lb_api(tmp_path, real_cloud)
    d = daemon(tmp_path, real_cloud, ovn_octavia, api,
               handlers="neutron_port,services").start()
    assert ovn_octavia.octavia is not None
    group = ovn_octavia.octavia.api.proc
    assert group is not None
    stopped = False
    try:
        d.wait_ready(60)
        os.killpg(group.pid, signal.SIGSTOP)
        stopped = True
        address = vip(ovn_octavia)
        web(api, "late", address)
        endpoints(api, "late", member.address)
        # Not ready, naming Octavia; alive.
        wait_for(lambda: d.get("/ready?verbose")[0] != 200 and
                 "[-]octavia" in d.get("/ready?verbose")[1], 60,
                 lambda: f"octavia named\n{d.get('/ready?verbose')[1]}")
        assert d.probe("/alive") == 200
        # The port handler, a process of its own, still makes ports.
        name = f"pod-{uuid.uuid4().hex[:6]}"
        api.add_pod("default", name, node1.name)
        wait_for(lambda: api.podports.get(("default", name)) is not None,
                 60, "the pod's PodPort while Octavia is stopped")
        assert d.probe("/alive") == 200
        os.killpg(group.pid, signal.SIGCONT)
        stopped = False
        d.wait_ready(90)
        wait_for(lambda: "m" in probe(client, "tcp", address, 80, 1, 2), 90,
                 "the Service made meanwhile answers", interval=0)
        assert [lb.vip for lb in ours(lbs, api)] == [address]
        api.delete_service("default", "late")
        api.delete_pod("default", name)
        wait_for(lambda: not ours(lbs, api), 60, "no load balancer left")
    finally:
        if stopped:
            os.killpg(group.pid, signal.SIGCONT)
        d.close()
        sweep(lbs, api)
