"""What a Service and its EndpointSlices ask of the cloud: one load
balancer, its VIP the Service's ``clusterIP``, a listener and a pool per
port and protocol, the ready endpoints as members.

Pure: the Service and its EndpointSlices in (as their informers decode
them, :mod:`kuryr_supervisor.kubernetes.services`: every field as the
tenant wrote it), a :class:`Wanted` out, or a :class:`Skipped` saying why
no load balancer is made (and whether that is worth an Event). Every
value is judged here: an address that is not IPv4 or a port out of range
is left out, never sent to Octavia.

The rules, after Kuryr's and Kubernetes' own:

* ``ExternalName`` and headless Services (``clusterIP: None``) make
  nothing (DNS alone serves them);
* ``NodePort`` and ``LoadBalancer`` Services get their ClusterIP part; what
  is not provided is said (:attr:`Wanted.unprovided`);
* IPv4 only: a dual-stack Service gets its IPv4 ``clusterIP``, an
  IPv6-only one nothing;
* protocols TCP and UDP (and SCTP when ``sctp`` is allowed): a port of
  another protocol is left out, said;
* ``sessionAffinity: ClientIP`` is ``SOURCE_IP``, else ``SOURCE_IP_PORT``
  (the OVN provider takes no other algorithm);
* members: every endpoint of an IPv4 slice whose ``ready`` condition is
  not false and that is not terminating, on the port its slice names for
  the Service port (a named ``targetPort`` resolves per endpoint: the
  EndpointSlice controller groups endpoints by their numbers, so each
  slice carries its own); a Service without a selector (``kubernetes``'s:
  the API servers) works the same, from the slices someone else keeps.
"""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Iterator
from typing import Any

from kuryr_supervisor.controller.openstack.lbwire import Member
from kuryr_supervisor.kubernetes.services import EndpointSlice, Service

PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclasses.dataclass(frozen=True)
class Listener:
    """One port of the Service: its listener, its pool's members."""

    name: str
    protocol: str
    port: int
    members: frozenset[Member] = frozenset()

    @property
    def key(self) -> tuple[str, int]:
        """What Octavia tells listeners apart by."""
        return self.protocol, self.port


@dataclasses.dataclass(frozen=True)
class Wanted:
    """One load balancer, as the Service asks for it."""

    uid: str
    namespace: str
    name: str
    vip: str
    algorithm: str
    listeners: tuple[Listener, ...]
    #: What the Service asks that is not provided (said in an Event).
    unprovided: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Skipped:
    """No load balancer for this Service, and why."""

    why: str
    told: bool = False          # worth a Normal Event on the Service


def ipv4(value: Any) -> str:
    """``value`` as an IPv4 address ("" when it is none)."""
    try:
        return str(ipaddress.IPv4Address(value)) if isinstance(value, str) \
            else ""
    except ValueError:
        return ""


def port(value: Any) -> int:
    """``value`` as a port number (0 when it is none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) \
        and 1 <= value <= 65535 else 0


def _vip(svc: Service) -> str:
    candidates = svc.cluster_ips or (svc.cluster_ip,)
    return next((v for v in map(ipv4, candidates) if v), "")


def _endpoints(slices: Iterable[EndpointSlice]
               ) -> Iterator[tuple[str, dict[str, int]]]:
    """(address, service port name -> its number there) of every endpoint
    that takes traffic."""
    for item in slices:
        if item.address_type != "IPv4":
            continue
        numbers = {name: port(number) for name, number in item.ports
                   if port(number)}
        for endpoint in item.endpoints:
            if endpoint.ready is False or endpoint.terminating is True:
                continue
            for address in endpoint.addresses:
                if (ip := ipv4(address)):
                    yield ip, numbers


def wanted(svc: Service, slices: Iterable[EndpointSlice], *,
           sctp: bool = False) -> Wanted | Skipped:
    """What ``svc`` asks of the cloud (see the module)."""
    if svc.type == "ExternalName":
        return Skipped("ExternalName: served by DNS alone")
    if svc.cluster_ip == "None":
        return Skipped("headless: served by DNS alone")
    vip = _vip(svc)
    if not vip:
        return Skipped("no IPv4 clusterIP (IPv6 is not provided)", told=True)
    allowed = PROTOCOLS if sctp else PROTOCOLS[:2]
    unprovided = []
    if svc.type in ("NodePort", "LoadBalancer"):
        unprovided.append(f"type {svc.type}: only its ClusterIP is provided "
                          f"(no node port, no external load balancer)")
    ports, seen = [], set()
    for item in svc.ports:
        number = port(item.port)
        if not number or (item.protocol, number) in seen:
            continue
        if item.protocol not in allowed:
            unprovided.append(f"port {number}/{item.protocol[:16]}: protocol "
                              "not provided")
            continue
        seen.add((item.protocol, number))
        ports.append((item.name, item.protocol, number))
    if not ports:
        return Skipped("no port that can be provided", told=True)
    endpoints = list(_endpoints(slices))
    listeners = tuple(sorted((Listener(
        name, protocol, number, frozenset(
            Member(address, numbers[name]) for address, numbers in endpoints
            if name in numbers))
        for name, protocol, number in ports), key=lambda li: li.key))
    affinity = svc.session_affinity == "ClientIP"
    return Wanted(svc.uid, svc.namespace, svc.name, vip,
                  "SOURCE_IP" if affinity else "SOURCE_IP_PORT", listeners,
                  tuple(unprovided))
