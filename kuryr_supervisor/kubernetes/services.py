"""Services and EndpointSlices (core/v1, discovery.k8s.io/v1): the fields
the services handler decides on, and their sources for an informer.

A Service or an EndpointSlice is written by a tenant (the slices of a
Service without a selector too, the ``kubernetes`` Service's by the API
servers): each field is read for its type alone and kept as it is,
anything else dropped (a field of the wrong type reads as absent), so
nothing here raises on a hostile object; what the values may be (IPv4
addresses, ports in range, protocols) is judged by the handler's rules
(:mod:`kuryr_supervisor.controller.services.desired`). Decoded into small
frozen records, so what the handler holds per Service is a few strings,
not the object's JSON.

EndpointSlices are tied to their Service by the label
``kubernetes.io/service-name`` (:data:`SERVICE_LABEL`); those without it
are not watched at all (the label selector ``kubernetes.io/service-name``
asks the API server for the others alone).
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from typing import Any

from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.listing import Listing

#: The label that ties an EndpointSlice to its Service.
SERVICE_LABEL = "kubernetes.io/service-name"
#: Objects per page of a list.
PAGE_SIZE = 500
#: Ports and endpoints kept of one object at most (the API allows 100
#: ports a slice and 1000 endpoints; more is no object the API made).
MAX_ITEMS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    protocol: str
    port: Any
    node_port: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class Service:
    uid: str
    namespace: str
    name: str
    type: str
    cluster_ip: str
    cluster_ips: tuple[str, ...]
    ports: tuple[ServicePort, ...]
    session_affinity: str

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[str, ...]
    #: ``conditions``: None where the slice does not say.
    ready: bool | None
    terminating: bool | None


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointSlice:
    uid: str
    namespace: str
    name: str
    #: The Service it belongs to (its ``kubernetes.io/service-name``).
    service: str
    address_type: str
    #: (port name, number) as the slice names them.
    ports: tuple[tuple[str, Any], ...]
    endpoints: tuple[Endpoint, ...]

    @property
    def key(self) -> tuple[str, str]:
        """The Service's (namespace, name)."""
        return self.namespace, self.service


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value[:MAX_ITEMS]) if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def service(obj: Mapping[str, Any]) -> Service:
    meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    ports = tuple(ServicePort(_str(p.get("name")),
                              _str(p.get("protocol")) or "TCP",
                              p.get("port"), p.get("nodePort"))
                  for p in map(_map, _list(spec.get("ports"))))
    return Service(
        uid=_str(meta.get("uid")),
        namespace=sys.intern(_str(meta.get("namespace"))),
        name=_str(meta.get("name")), type=_str(spec.get("type")) or "ClusterIP",
        cluster_ip=_str(spec.get("clusterIP")),
        cluster_ips=tuple(_str(ip) for ip in _list(spec.get("clusterIPs"))),
        ports=ports, session_affinity=_str(spec.get("sessionAffinity")))


def endpoint_slice(obj: Mapping[str, Any]) -> EndpointSlice:
    meta = _map(obj.get("metadata"))
    ports = tuple((_str(p.get("name")), p.get("port"))
                  for p in map(_map, _list(obj.get("ports"))))
    endpoints = []
    for item in map(_map, _list(obj.get("endpoints"))):
        conditions = _map(item.get("conditions"))
        endpoints.append(Endpoint(
            tuple(_str(a) for a in _list(item.get("addresses"))),
            _flag(conditions.get("ready")),
            _flag(conditions.get("terminating"))))
    return EndpointSlice(
        uid=_str(meta.get("uid")),
        namespace=sys.intern(_str(meta.get("namespace"))),
        name=_str(meta.get("name")),
        service=_str(_map(meta.get("labels")).get(SERVICE_LABEL)),
        address_type=_str(obj.get("addressType")), ports=ports,
        endpoints=tuple(endpoints))


class Services(Listing[Service]):
    """Every Service of the cluster, for an informer."""

    def __init__(self, client: K8sClient, *, page_size: int = PAGE_SIZE,
                 beat: Callable[[], None] = lambda: None) -> None:
        super().__init__(client.services, service, page_size=page_size,
                         beat=beat)


class EndpointSlices(Listing[EndpointSlice]):
    """Every EndpointSlice of a Service (labelled), for an informer."""

    def __init__(self, client: K8sClient, *, page_size: int = PAGE_SIZE,
                 beat: Callable[[], None] = lambda: None) -> None:
        super().__init__(client.endpointslices, endpoint_slice,
                         label_selector=SERVICE_LABEL, page_size=page_size,
                         beat=beat)
