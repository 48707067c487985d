"""One client for every Kubernetes resource.

A :class:`Resource` names a kind of object as the API serves it (group,
version, plural, kind, namespaced or not) and builds its paths; a
:class:`ResourceClient` speaks the verbs on one resource (get, create,
replace, replace_status, patch, delete, page, watch) over the process's
transport (:mod:`.transport`: deadlines, the mapping of every failure to
:class:`~.wire.K8sGone`, :class:`~.wire.K8sTemporary` or
:class:`~.wire.K8sPermanent`, the fence before the writes that steer pods
or nodes). What an object *means* stays in its own module (its schema and
codec: :mod:`.podport`, :mod:`.nodenetwork`, :mod:`.leases`,
:mod:`.nodes`, :mod:`.events`); what the API *does* with it is here once.

Answers are plain JSON (``dict``): a list is read page by page
(:meth:`ResourceClient.page`) and a caller decodes each page before it
reads the next, so 10,000 pods never exist at once as decoded JSON; a
watch decodes each event with the caller's function.

Invariants: a 404 on a GET is None and on a DELETE False (the object is
not there, which callers act on), every other failure is raised; a list's
``resource_version`` asks as client-go's reflector does (:func:`versioned`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, TypeVar
from urllib.parse import quote

from kuryr_supervisor.kubernetes.wire import K8sPermanent, WatchStream

T = TypeVar("T")
Raw = Mapping[str, Any]

#: The PATCH bodies the API takes, by content type.
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclasses.dataclass(frozen=True)
class Resource:
    """A resource as the API serves it; ``group`` "" is the core group."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """The objects' ``apiVersion``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, name: str = "", *, namespace: str = "",
             subresource: str = "") -> str:
        """The path of the collection (no ``name``: of every namespace
        unless ``namespace``), of one object, or of its ``subresource``;
        every name quoted, so no name can reach another path."""
        if namespace and not self.namespaced:
            raise ValueError(f"{self.plural} are not namespaced")
        if name and self.namespaced and not namespace:
            raise ValueError(f"a {self.kind} needs its namespace")
        if subresource and not name:
            raise ValueError("a subresource needs the object's name")
        path = (f"/apis/{self.group}/{self.version}" if self.group
                else f"/api/{self.version}")
        if namespace:
            path += f"/namespaces/{quote(namespace, '')}"
        path += f"/{self.plural}"
        if name:
            path += f"/{quote(name, '')}"
        return f"{path}/{subresource}" if subresource else path


PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease",
                  namespaced=True)
SERVICES = Resource("", "v1", "services", "Service", namespaced=True)
ENDPOINTSLICES = Resource("discovery.k8s.io", "v1", "endpointslices",
                          "EndpointSlice", namespaced=True)
NETWORKPOLICIES = Resource("networking.k8s.io", "v1", "networkpolicies",
                           "NetworkPolicy", namespaced=True)


def versioned(resource_version: str) -> list[tuple[str, str]]:
    """The query of a list at ``resource_version``: "" a consistent read
    (a quorum read from etcd); "0" any version, from the API server's
    watch cache; a version seen before, from the cache, never older than
    it (``resourceVersionMatch=NotOlderThan``): the cheap relist."""
    if not resource_version:
        return []
    if resource_version == "0":
        return [("resourceVersion", "0")]
    return [("resourceVersion", resource_version),
            ("resourceVersionMatch", "NotOlderThan")]


def selected(field_selector: str, label_selector: str
             ) -> list[tuple[str, str]]:
    return [*([("fieldSelector", field_selector)] if field_selector else []),
            *([("labelSelector", label_selector)] if label_selector else [])]


class Page(NamedTuple):
    """One page of a list: raw objects, the list's version, the next
    page's token ("" at the end)."""

    items: list[dict[str, Any]]
    resource_version: str
    token: str


class Transport(Protocol):
    """What the verbs need of the connection (:class:`~.transport.
    K8sTransport` fits)."""

    request_timeout: float
    watch_timeout: int

    @property
    def watch_read_timeout(self) -> float: ...
    def request(self, method: str, path: str, *,
                query: list[tuple[str, Any]] | None = None,
                body: Any = None, content_type: str | None = None,
                timeout: Any = None) -> Any: ...
    def request_json(self, method: str, path: str, **kwargs: Any) -> Any: ...
    def read_body(self, raw: Any) -> bytes: ...


class ResourceClient:
    """The verbs on one resource (see the module); ``namespace`` is a
    namespaced resource's, and names nothing for a cluster-scoped one."""

    def __init__(self, transport: Transport, resource: Resource) -> None:
        self.transport, self.resource = transport, resource

    def get(self, name: str, *, namespace: str = "") -> dict[str, Any] | None:
        """The object, or None if the API says it does not exist (404)."""
        try:
            obj: dict[str, Any] = self.transport.request_json(
                "GET", self.resource.path(name, namespace=namespace))
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def create(self, obj: Raw, *, namespace: str = "") -> dict[str, Any]:
        """Create; 409 (K8sPermanent) when one of that name exists, 404
        when the resource is not installed."""
        out: dict[str, Any] = self.transport.request_json(
            "POST", self.resource.path(namespace=namespace), body=dict(obj))
        return out

    def replace(self, name: str, obj: Raw, *,
                namespace: str = "") -> dict[str, Any]:
        """Replace (with a status subresource, the status is kept);
        ``metadata.resourceVersion`` in ``obj`` is the precondition (409
        when the object changed meanwhile)."""
        out: dict[str, Any] = self.transport.request_json(
            "PUT", self.resource.path(name, namespace=namespace),
            body=dict(obj))
        return out

    def replace_status(self, name: str, obj: Raw, *,
                       namespace: str = "") -> dict[str, Any]:
        """Replace the status subresource (the rest of ``obj`` is not
        written); ``metadata.resourceVersion`` as in :meth:`replace`."""
        out: dict[str, Any] = self.transport.request_json(
            "PUT", self.resource.path(name, namespace=namespace,
                                      subresource="status"), body=dict(obj))
        return out

    def patch(self, name: str, body: Any, *, namespace: str = "",
              content_type: str = MERGE_PATCH,
              subresource: str = "") -> dict[str, Any]:
        """Patch the object (or its ``subresource``) with ``body``, a
        merge patch unless ``content_type`` says otherwise
        (:data:`STRATEGIC_MERGE_PATCH`, :data:`JSON_PATCH`: a list)."""
        out: dict[str, Any] = self.transport.request_json(
            "PATCH", self.resource.path(name, namespace=namespace,
                                        subresource=subresource),
            body=body if isinstance(body, list) else dict(body),
            content_type=content_type)
        return out

    def delete(self, name: str, *, namespace: str = "", uid: str = "") -> bool:
        """Delete (``uid``: only that object, not another made since under
        the same name: 409 otherwise); False if already gone."""
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self.transport.read_body(self.transport.request(
                "DELETE", self.resource.path(name, namespace=namespace),
                body=body))
        except K8sPermanent as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def page(self, *, namespace: str = "", limit: int = 0, token: str = "",
             resource_version: str = "", field_selector: str = "",
             label_selector: str = "") -> Page:
        """One page of the objects the selectors match (``limit`` 0: all
        of them). The first page asks for ``resource_version``
        (:func:`versioned`); a later one carries its ``token`` alone (the
        API server keeps the first page's version; a token too old is
        410, :class:`~.wire.K8sGone`)."""
        query = selected(field_selector, label_selector)
        if limit:
            query.append(("limit", str(limit)))
        query += [("continue", token)] if token else versioned(resource_version)
        data = self.transport.request_json(
            "GET", self.resource.path(namespace=namespace), query=query)
        meta = data.get("metadata") or {}
        return Page(list(data.get("items") or []),
                    str(meta.get("resourceVersion") or ""),
                    str(meta.get("continue") or ""))

    def watch(self, resource_version: str, decode: Callable[[Raw], T], *,
              namespace: str = "", field_selector: str = "",
              label_selector: str = "", bookmarks: bool = True,
              timeout: float | None = None) -> WatchStream[T]:
        """A bounded watch resuming after ``resource_version``, each
        object decoded with ``decode``: the server ends it after the
        configured ``watch_timeout`` (``timeout``: that many seconds,
        rounded up), and the read waits a margin longer."""
        transport = self.transport
        if timeout is None:
            seconds, read = transport.watch_timeout, transport.watch_read_timeout
        else:
            seconds = max(1, int(timeout + 0.999))
            read = seconds + transport.request_timeout
        query: list[tuple[str, Any]] = [
            *selected(field_selector, label_selector), ("watch", "true"),
            ("resourceVersion", resource_version),
            *([("allowWatchBookmarks", "true")] if bookmarks else []),
            ("timeoutSeconds", seconds)]
        raw = transport.request(
            "GET", self.resource.path(namespace=namespace), query=query,
            timeout=(transport.request_timeout, read))
        return WatchStream(raw, decode)


def getter(resource: ResourceClient, decode: Callable[[Raw], T]
           ) -> Callable[[str, str], T | None]:
    """(namespace, name) -> the object decoded, or None (404)."""
    def get(namespace: str, name: str) -> T | None:
        obj = resource.get(name, namespace=namespace)
        return None if obj is None else decode(obj)
    return get
