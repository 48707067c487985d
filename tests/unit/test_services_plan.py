"""A Service and its EndpointSlices as a load balancer (what is wanted),
and the writes that make Octavia's load balancer so (the plan): tables of
Services, slices and load balancers, as the API and Octavia give them."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kuryr_supervisor.controller.openstack.lbwire import Member
from kuryr_supervisor.controller.services import desired, plan
from kuryr_supervisor.controller.services.desired import Listener, Skipped, Wanted
from kuryr_supervisor.controller.services.plan import (
    Actual,
    ActualListener,
    ActualPool,
    AddListener,
    AddPool,
    Create,
    Delete,
    DeleteListener,
    DeletePool,
    SetMembers,
)
from kuryr_supervisor.kubernetes import services as k8s_services


def wanted_of(svc: dict[str, Any], slices: list[Any], *,
              sctp: bool = False) -> Wanted | Skipped:
    """What the Service and slices ask, decoded as their watches decode
    them."""
    return desired.wanted(k8s_services.service(svc),
                          [k8s_services.endpoint_slice(s) for s in slices],
                          sctp=sctp)


def service(**spec: Any) -> dict[str, Any]:
    base = {"type": "ClusterIP", "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ports": [{"name": "dns", "protocol": "UDP", "port": 53,
                       "targetPort": 53},
                      {"name": "dns-tcp", "protocol": "TCP", "port": 53,
                       "targetPort": "dns-tcp"}]}
    return {"metadata": {"uid": "u-1", "namespace": "kube-system",
                         "name": "kube-dns"}, "spec": {**base, **spec}}


def endpoint(address: str, *, ready: Any = True,
             terminating: Any = None) -> dict[str, Any]:
    conditions: dict[str, Any] = {}
    if ready is not None:
        conditions["ready"] = ready
    if terminating is not None:
        conditions["terminating"] = terminating
    return {"addresses": [address], "conditions": conditions}


def slice_(*endpoints: dict[str, Any], ports: dict[str, int] | None = None,
           family: str = "IPv4") -> dict[str, Any]:
    ports = ports if ports is not None else {"dns": 53, "dns-tcp": 53}
    return {"addressType": family, "endpoints": list(endpoints),
            "ports": [{"name": n, "port": p} for n, p in ports.items()]}


def test_a_clusterip_service_with_ready_endpoints() -> None:
    got = wanted_of(service(), [slice_(
        endpoint("10.0.0.5"), endpoint("10.0.0.6", ready=None),
        endpoint("10.0.0.7", ready=False),
        endpoint("10.0.0.8", terminating=True))])
    assert isinstance(got, Wanted)
    assert (got.uid, got.vip, got.algorithm) == ("u-1", "10.96.0.10",
                                                 "SOURCE_IP_PORT")
    members = frozenset({Member("10.0.0.5", 53), Member("10.0.0.6", 53)})
    assert got.listeners == (Listener("dns-tcp", "TCP", 53, members),
                             Listener("dns", "UDP", 53, members))
    assert got.unprovided == ()


def test_a_named_target_port_resolves_per_slice() -> None:
    """Pods with different numbers for the named port: the EndpointSlice
    controller puts them in different slices, each naming its number."""
    svc = service(ports=[{"name": "http", "protocol": "TCP", "port": 80,
                          "targetPort": "web"}])
    got = wanted_of(svc, [slice_(endpoint("10.0.0.5"),
                                      ports={"http": 8080}),
                               slice_(endpoint("10.0.0.6"),
                                      ports={"http": 9090})])
    assert isinstance(got, Wanted)
    assert got.listeners[0].members == {Member("10.0.0.5", 8080),
                                        Member("10.0.0.6", 9090)}


@pytest.mark.parametrize(("spec", "why", "told"), [
    ({"type": "ExternalName", "externalName": "x.example"}, "ExternalName",
     False),
    ({"clusterIP": "None", "clusterIPs": ["None"]}, "headless", False),
    ({"clusterIP": "fd00::1", "clusterIPs": ["fd00::1"]}, "IPv6", True),
    ({"ports": [{"port": 99, "protocol": "SCTP"}]}, "no port", True),
])
def test_services_that_make_no_load_balancer(spec: dict[str, Any], why: str,
                                             told: bool) -> None:
    got = wanted_of(service(**spec), [])
    assert isinstance(got, Skipped) and why in got.why and got.told is told


def test_what_is_not_provided_is_said() -> None:
    svc = service(type="NodePort", ports=[
        {"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30080},
        {"name": "s", "port": 9, "protocol": "SCTP"}],
        sessionAffinity="ClientIP",
        clusterIPs=["fd00::1", "10.96.0.11"], clusterIP="fd00::1")
    got = wanted_of(svc, [])
    assert isinstance(got, Wanted)
    assert got.vip == "10.96.0.11" and got.algorithm == "SOURCE_IP"
    assert [li.key for li in got.listeners] == [("TCP", 80)]
    assert any("NodePort" in u for u in got.unprovided)
    assert any("SCTP" in u for u in got.unprovided)
    sctp = wanted_of(svc, [], sctp=True)
    assert isinstance(sctp, Wanted) and len(sctp.listeners) == 2


def test_hostile_slices_are_left_out() -> None:
    """A Service without a selector takes slices a tenant writes: nothing
    that is not an IPv4 address and a port in range reaches Octavia."""
    got = wanted_of(service(), [
        slice_(endpoint("fd00::5"), family="IPv6"),
        slice_(endpoint("999.0.0.1"), endpoint("10.0.0.1 ; rm"),
               {"addresses": "10.0.0.2"}, "x",            # type: ignore[arg-type]
               ports={"dns": 70000, "dns-tcp": 53}),
        {"addressType": "IPv4", "endpoints": None, "ports": "x"},
    ])
    assert isinstance(got, Wanted)
    assert all(not li.members for li in got.listeners)


# -- the plan --------------------------------------------------------------------
def wanted(*members: Member, algorithm: str = "SOURCE_IP_PORT") -> Wanted:
    return Wanted("u-1", "ns", "svc", "10.96.0.10", algorithm, (
        Listener("http", "TCP", 80, frozenset(members)),
        Listener("dns", "UDP", 53, frozenset(members))))


def actual(*members: Member, status: str = "ACTIVE",
           vip: str = "10.96.0.10", algorithm: str = "SOURCE_IP_PORT",
           ports: tuple[tuple[str, int], ...] = (("TCP", 80), ("UDP", 53))
           ) -> Actual:
    return Actual("lb-1", vip, status, tuple(
        ActualListener(f"li-{p}-{n}", p, n, ActualPool(
            f"pool-{p}-{n}", algorithm, frozenset(members)))
        for p, n in ports))


A, B = Member("10.0.0.5", 80), Member("10.0.0.6", 80)


def test_as_wanted_makes_no_write() -> None:
    assert plan.plan(wanted(A, B), actual(A, B)).done
    assert plan.plan(None, None).done


def test_nothing_there_is_one_create_of_the_whole_tree() -> None:
    assert plan.plan(wanted(A), None).steps == (Create(wanted(A)),)


def test_members_change_in_one_batch_per_pool() -> None:
    want = wanted(A, B)
    steps = plan.plan(want, actual(A)).steps
    assert steps == (SetMembers("pool-TCP-80", want.listeners[0]),
                     SetMembers("pool-UDP-53", want.listeners[1]))


def test_busy_waits_error_and_wrong_vip_are_remade() -> None:
    assert plan.plan(wanted(A), actual(status="PENDING_UPDATE")).wait
    for bad in (actual(A, status="ERROR"), actual(A, vip="10.96.0.99")):
        steps = plan.plan(wanted(A), bad).steps
        assert isinstance(steps[0], Delete) and steps[1] == Create(wanted(A))


def test_listeners_follow_the_ports_and_pools_the_algorithm() -> None:
    have = actual(A, ports=(("TCP", 80), ("TCP", 8080)))
    steps = plan.plan(wanted(A), have).steps
    assert isinstance(steps[0], DeleteListener)
    assert steps[0].key == ("TCP", 8080)
    assert isinstance(steps[1], AddListener) and \
        steps[1].listener.key == ("UDP", 53)
    # a pool of another algorithm: deleted, then made again
    steps = plan.plan(wanted(A, algorithm="SOURCE_IP"), actual(A)).steps
    assert [type(s) for s in steps] == [DeletePool, DeletePool, AddPool,
                                        AddPool]
    assert all(s.algorithm == "SOURCE_IP" for s in steps
               if isinstance(s, AddPool))


def test_a_listener_without_pool_gets_one_and_orphans_go() -> None:
    bare = dataclasses.replace(actual(A), listeners=tuple(
        dataclasses.replace(li, pool=None) for li in actual(A).listeners),
        orphans=("pool-old",))
    steps = plan.plan(wanted(A), bare).steps
    assert steps[0] == DeletePool("pool-old", "no listener")
    assert [type(s) for s in steps[1:]] == [AddPool, AddPool]
    # a pool made without members (Octavia's own create takes none)
    empty = actual(ports=(("TCP", 80), ("UDP", 53)))
    assert [type(s) for s in plan.plan(wanted(A), empty).steps] == \
        [SetMembers, SetMembers]


def test_a_service_gone_deletes_its_load_balancer() -> None:
    assert plan.plan(None, actual(A)).steps == (Delete("lb-1", "gone"),)


@pytest.mark.parametrize("obj", [
    {}, {"metadata": [], "spec": "x"},
    {"metadata": {"uid": 7, "name": None}, "spec": {
        "ports": "x", "clusterIPs": "10.0.0.1", "clusterIP": ["x"],
        "type": 3, "sessionAffinity": {}}},
    {"spec": {"ports": [None, 5, {"port": "80", "protocol": 6},
                        {"port": True}], "clusterIP": "10.96.0.9"}},
])
def test_a_hostile_service_decodes_to_nothing_that_is_sent(
        obj: dict[str, Any]) -> None:
    """Whatever a tenant wrote, the codec never raises, and nothing that
    is not an IPv4 VIP and a port in range makes a load balancer."""
    got = desired.wanted(k8s_services.service(obj), [
        k8s_services.endpoint_slice(obj)])
    assert isinstance(got, Skipped)
