"""The services handler's parts on their own: which Services a change
marks (the book), whose load balancers are ours (naming), where members
go (subnets), and a job that finds the load balancer an earlier leader
made mid-create (adopted by its VIP, never made twice)."""
from __future__ import annotations

import ipaddress
import threading
import time
from pathlib import Path

import pytest

from kuryr_supervisor.controller.openstack.lbwire import LoadBalancer, Member, VipInUse
from kuryr_supervisor.controller.openstack.wire import Subnet
from kuryr_supervisor.controller.services.book import ServiceBook
from kuryr_supervisor.controller.services.desired import Listener, Wanted
from kuryr_supervisor.controller.services.inventory import SERVICES_TAG, Naming
from kuryr_supervisor.controller.services.jobs import Job, VipHeld
from kuryr_supervisor.controller.services.subnets import Subnets, placed
from kuryr_supervisor.controller.services.work import Worker
from kuryr_supervisor.kubernetes.services import endpoint_slice, service
from tests.fixtures.lbclouds import LbCloud

TAG = "kuryr-supervisor:c1"


def svc(name: str, uid: str, ip: str = "10.96.0.10") -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]}}


def eps(name: str, service_name: str, *addresses: str) -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": name, "labels": {
        "kubernetes.io/service-name": service_name}},
        "addressType": "IPv4", "ports": [{"name": "", "port": 8080}],
        "endpoints": [{"addresses": [a]} for a in addresses]}


def test_the_book_marks_what_changed_and_only_that() -> None:
    book = ServiceBook()
    book.replace_services([service(svc("a", "u-a")), service(svc("b", "u-b"))])
    book.replace_slices([endpoint_slice(eps("a-1", "a", "10.0.0.1"))])
    assert book.synced and book.take() == {"u-a", "u-b"}
    book.put_service(service(svc("a", "u-a")))             # the same
    book.put_slice(endpoint_slice(eps("a-1", "a", "10.0.0.1")))
    assert book.take() == set()
    book.put_slice(endpoint_slice(eps("a-2", "a", "10.0.0.2")))
    book.put_slice(endpoint_slice(eps("x-1", "nobody", "10.0.0.3")))
    assert book.take() == {"u-a"}
    entry = book.get("u-a")
    assert entry is not None and len(entry[1]) == 2
    book.drop_service(service(svc("b", "u-b")))
    assert book.take() == {"u-b"} and book.get("u-b") is None
    # a relist: what it lacks is gone, what changed is marked
    book.replace_services([service(svc("a", "u-a", "10.96.0.11"))])
    assert book.take() == {"u-a"}
    book.replace_slices([endpoint_slice(eps("a-1", "a", "10.0.0.1"))])
    assert book.take() == {"u-a"}


def lb(name: str, tags: tuple[str, ...] = (TAG, SERVICES_TAG)) -> LoadBalancer:
    return LoadBalancer("id", name, "10.96.0.10", "ACTIVE", tags)


def test_a_load_balancer_is_ours_by_its_tags_and_name() -> None:
    naming = Naming(TAG)
    assert naming.name("u-1") == f"{TAG}:u-1"
    assert naming.uid_of(lb(f"{TAG}:u-1")) == "u-1"
    assert naming.uid_of(lb(f"{TAG}:u-1", (TAG,))) == ""         # a tag lost
    assert naming.uid_of(lb("kuryr-supervisor:c2:u-1")) == ""    # another's
    assert naming.uid_of(lb(f"{TAG}:u 1; rm")) == ""
    assert naming.uid_of(lb(f"{TAG}:")) == ""


def test_members_go_with_the_smallest_subnet_holding_them() -> None:
    subnets = Subnets(lambda: [
        Subnet("wide", ipaddress.IPv4Network("10.0.0.0/8"), None),
        Subnet("pods", ipaddress.IPv4Network("10.1.0.0/16"), None)])
    subnets.refresh()
    assert subnets.of("10.1.2.3") == "pods"
    assert subnets.of("10.2.0.1") == "wide"
    assert subnets.of("192.168.0.1") == ""
    wanted = Wanted("u", "ns", "s", "10.96.0.10", "SOURCE_IP_PORT", (
        Listener("", "TCP", 80, frozenset({Member("10.1.2.3", 80),
                                           Member("192.168.0.1", 80)})),))
    kept, out = placed(wanted, subnets.of)
    assert kept.listeners[0].members == {Member("10.1.2.3", 80)}
    assert out == ("192.168.0.1",)
    assert placed(kept, subnets.of) == (kept, ())


@pytest.fixture
def worker(fake_octavia: LbCloud, tmp_path: Path) -> Worker:
    api = fake_octavia.api(tmp_path)
    return Worker(api.within(2.0), naming=lambda: Naming(TAG),
                  subnet_of=lambda address: fake_octavia.pod_subnet_id,
                  vip_subnet_id=fake_octavia.service_subnet_id,
                  provider="ovn", settle_timeout=lambda: 10.0,
                  alive=lambda uid: uid == "u-alive",
                  stopping=threading.Event())


def wanted_web(cloud: LbCloud, vip: str) -> Wanted:
    return Wanted("u-1", "ns", "web", vip, "SOURCE_IP_PORT", (Listener(
        "http", "TCP", 80, frozenset({Member(cloud.member(1), 8080)})),))


def test_a_create_finds_what_an_earlier_leader_made(
        fake_octavia: LbCloud, worker: Worker, tmp_path: Path) -> None:
    """A leader that lost its Lease mid-create (or a create whose answer
    was lost) may have made the load balancer after the new leader's
    lists: the job finds it by its VIP and adopts it; no second one."""
    vip = fake_octavia.vip()
    want = wanted_web(fake_octavia, vip)
    api = fake_octavia.api(tmp_path)
    made = api.create_load_balancer(
        name=f"{TAG}:u-1", description="ns/web", vip_address=vip,
        vip_subnet_id=fake_octavia.service_subnet_id,
        tags=[TAG, SERVICES_TAG], provider="ovn", listeners=[])
    since = time.time()
    out = worker.run(Job("u-1", lambda: want, None, True))
    assert out.error is None and out.done and out.created == ""
    assert out.actual is not None and out.actual.id == made.id
    assert [li.key for li in out.actual.listeners] == [("TCP", 80)]
    fake = fake_octavia.fake
    assert fake is not None
    # the listener, its pool, its members: no load balancer made
    assert dict(fake.writes(since)) == {
        "POST /v2/lbaas/listeners": 1, "POST /v2/lbaas/pools": 1,
        "PUT /v2/lbaas/pools/{id}/members": 1}
    assert len(api.load_balancers(vip_address=vip)) == 1


@pytest.mark.parametrize("name, tags, error", [
    (f"{TAG}:u-gone", (TAG, SERVICES_TAG), VipHeld),
    (f"{TAG}:u-alive", (TAG, SERVICES_TAG), VipInUse),
    ("someone-else", (), VipInUse),
])
def test_a_vip_held_by_another_is_never_taken(
        fake_octavia: LbCloud, worker: Worker, tmp_path: Path, name: str,
        tags: tuple[str, ...], error: type[Exception]) -> None:
    vip = fake_octavia.vip()
    api = fake_octavia.api(tmp_path)
    api.create_load_balancer(
        name=name, description="", vip_address=vip,
        vip_subnet_id=fake_octavia.service_subnet_id, tags=list(tags),
        provider="ovn", listeners=[])
    out = worker.run(Job("u-1", lambda: wanted_web(fake_octavia, vip), None,
                         True))
    assert isinstance(out.error, error) and out.writes == ()
