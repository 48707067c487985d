"""The Kubernetes API adapter: with :mod:`.config`, the only importer of ``kubernetes``.

The client library is imported when a client is first built, never at
import time: in standalone mode the daemon does not pay its ~30 MiB and
~0.2 s of start-up.

The client library provides authentication and the HTTP transport (its
configuration is :mod:`.config`'s, re-exported here for callers); requests are made on raw paths and answers decoded as
plain JSON into the few fields the daemon uses, so a list of hundreds of
pods never becomes hundreds of model objects.

Invariants: every request has a client timeout (watches: the server-side
``timeoutSeconds`` plus a margin), so no caller blocks forever; every client
failure leaves this module as one of :class:`K8sGone`,
:class:`K8sTemporary` or :class:`K8sPermanent`, chained to its cause.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import urllib3
from oslo_config import cfg

from kuryr_supervisor.kubernetes.config import (  # noqa: F401 - re-exported
    is_configured,
    make_configuration,
    node_name,
    preload,
)
from kuryr_supervisor.kubernetes.registry import Pod
from kuryr_supervisor.kubernetes.wire import (  # noqa: F401 - re-exported
    K8sError,
    K8sGone,
    K8sPermanent,
    K8sTemporary,
    LeaseRecord,
    WatchEvent,
    WatchStream,
    from_status,
    pod_from_json,
)

if TYPE_CHECKING:
    from kubernetes import client

LOG = logging.getLogger(__name__)

def _api_exception() -> type[client.ApiException]:
    from kubernetes.client import ApiException
    return ApiException


class K8sClient:
    """The calls the daemon makes, on this node's pods and Node object."""

    def __init__(self, configuration: client.Configuration, *, node: str,
                 request_timeout: float = 5.0, watch_timeout: int = 60) -> None:
        from kubernetes import client
        self._api = client.ApiClient(configuration)
        self.node = node
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts,
                  environ: Mapping[str, str] = os.environ) -> K8sClient:
        return cls(make_configuration(conf, environ),
                   node=node_name(conf, environ),
                   request_timeout=conf.kubernetes.request_timeout,
                   watch_timeout=conf.kubernetes.watch_timeout)

    def close(self) -> None:
        self._api.close()

    @property
    def watch_read_timeout(self) -> float:
        """Longest silence of a healthy watch: the server ends it by then."""
        return self.watch_timeout + self.request_timeout + 5.0

    def _request(self, method: str, path: str, *,
                 query: list[tuple[str, Any]] | None = None,
                 body: Any = None, content_type: str | None = None,
                 timeout: Any = None) -> urllib3.HTTPResponse:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            params = self._api.param_serialize(
                method, path, query_params=query or [], header_params=headers,
                body=body, auth_settings=["BearerToken"])
            resp = self._api.call_api(
                *params, _request_timeout=timeout or (self.request_timeout,
                                                       self.request_timeout))
        except _api_exception() as exc:
            raise from_status(exc.status or 0, f"{method} {path}: {exc.reason}"
                               ) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise K8sTemporary(f"{method} {path}: {exc}") from exc
        raw: urllib3.HTTPResponse = resp.response
        if not 200 <= raw.status < 300:
            try:
                detail = raw.data[:300].decode("utf-8", "replace")
            except (urllib3.exceptions.HTTPError, OSError):
                detail = ""
            finally:
                raw.release_conn()
            raise from_status(raw.status, f"{method} {path}: HTTP "
                                           f"{raw.status} {detail}")
        return raw

    @staticmethod
    def _read(raw: urllib3.HTTPResponse) -> bytes:
        """The whole body; the connection goes back to the pool clean."""
        try:
            return bytes(raw.data)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raw.close()
            raise K8sTemporary(f"reading the response: {exc}") from exc
        finally:
            raw.release_conn()

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        data = self._read(self._request(method, path, **kwargs))
        try:
            return json.loads(data)
        except ValueError as exc:
            raise K8sTemporary(f"{method} {path}: bad JSON") from exc

    @property
    def _selector(self) -> tuple[str, str]:
        return ("fieldSelector", f"spec.nodeName={self.node}")

    # -- pods ------------------------------------------------------------------
    def list_pods(self, resource_version: str = "") -> tuple[list[Pod], str]:
        """This node's pods and the list's resourceVersion.

        ``resource_version`` picks who serves it: "" a consistent read (a
        quorum read from etcd); "0" any version, from the API server's watch
        cache; a version seen before, from the cache, never older than it
        (``resourceVersionMatch=NotOlderThan``) -- the cheap relist.
        """
        items, rv = self._list_pods([self._selector], resource_version)
        return [pod_from_json(item) for item in items], rv

    def _list_pods(self, query: list[tuple[str, str]], resource_version: str
                   ) -> tuple[list[dict[str, Any]], str]:
        """Raw pods and the list's version; ``resource_version`` as in
        :meth:`list_pods`."""
        query = list(query)
        if resource_version:
            query.append(("resourceVersion", resource_version))
            if resource_version != "0":
                query.append(("resourceVersionMatch", "NotOlderThan"))
        data = self._json("GET", "/api/v1/pods", query=query)
        return (list(data.get("items") or []),
                (data.get("metadata") or {}).get("resourceVersion", ""))

    def watch_pods(self, resource_version: str) -> WatchStream:
        """Open a bounded watch resuming after ``resource_version``."""
        raw = self._request("GET", "/api/v1/pods", query=[
            self._selector, ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.watch_timeout)],
            timeout=(self.request_timeout, self.watch_read_timeout))
        return WatchStream(raw)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod, or None if the API says it does not exist (404)."""
        try:
            data = self._json("GET", f"/api/v1/namespaces/{quote(namespace, '')}"
                                     f"/pods/{quote(name, '')}")
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return pod_from_json(data)

    # -- cluster-wide pods (the controller role) -----------------------------------
    def list_all_pods(self, resource_version: str = ""
                      ) -> tuple[list[dict[str, Any]], str]:
        """Every pod of the cluster (raw objects) and the list's version;
        ``resource_version`` as in :meth:`list_pods`."""
        return self._list_pods([], resource_version)

    def page_all_pods(self, resource_version: str = "", *, limit: int,
                      token: str = "") -> tuple[list[dict[str, Any]], str, str]:
        """One page of every pod: (raw objects, the list's version, the
        token of the next page or ""). The first page asks for
        ``resource_version`` as :meth:`list_pods` does; later pages carry
        only the token (the API server keeps the first page's version; a
        token too old is 410, :class:`K8sGone`)."""
        query: list[tuple[str, str]] = [("limit", str(limit))]
        if token:
            query.append(("continue", token))
            data = self._json("GET", "/api/v1/pods", query=query)
        else:
            return self._page(query, resource_version)
        meta = data.get("metadata") or {}
        return (list(data.get("items") or []), meta.get("resourceVersion", ""),
                str(meta.get("continue") or ""))

    def _page(self, query: list[tuple[str, str]], resource_version: str
              ) -> tuple[list[dict[str, Any]], str, str]:
        if resource_version:
            query.append(("resourceVersion", resource_version))
            if resource_version != "0":
                query.append(("resourceVersionMatch", "NotOlderThan"))
        data = self._json("GET", "/api/v1/pods", query=query)
        meta = data.get("metadata") or {}
        return (list(data.get("items") or []), meta.get("resourceVersion", ""),
                str(meta.get("continue") or ""))

    def watch_all_pods(self, resource_version: str,
                       decode: Any) -> WatchStream:
        """A bounded watch of every pod, events decoded with ``decode``."""
        raw = self._request("GET", "/api/v1/pods", query=[
            ("watch", "true"), ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.watch_timeout)],
            timeout=(self.request_timeout, self.watch_read_timeout))
        return WatchStream(raw, decode)

    # -- PodPorts (kuryr-supervisor.openstack.org/v1) ---------------------------
    @staticmethod
    def _podports(namespace: str, name: str = "") -> str:
        from kuryr_supervisor.kubernetes import podport
        path = (f"/apis/{podport.GROUP}/{podport.VERSION}/namespaces/"
                f"{quote(namespace, '')}/{podport.PLURAL}")
        return f"{path}/{quote(name, '')}" if name else path

    def page_podports(self, *, limit: int, token: str = ""
                      ) -> tuple[list[dict[str, Any]], str]:
        """One page of every PodPort of the cluster (raw objects) and the
        next page's token ("" at the end)."""
        from kuryr_supervisor.kubernetes import podport
        query = [("limit", str(limit))]
        if token:
            query.append(("continue", token))
        data = self._json("GET", f"/apis/{podport.GROUP}/{podport.VERSION}/"
                                 f"{podport.PLURAL}", query=query)
        return (list(data.get("items") or []),
                str((data.get("metadata") or {}).get("continue") or ""))

    def list_podport(self, namespace: str, name: str
                     ) -> tuple[list[dict[str, Any]], str]:
        """The PodPort named ``name`` (0 or 1 item) and the list's version,
        to watch from."""
        data = self._json("GET", self._podports(namespace), query=[
            ("fieldSelector", f"metadata.name={name}")])
        return (list(data.get("items") or []),
                (data.get("metadata") or {}).get("resourceVersion", ""))

    def watch_podport(self, namespace: str, name: str, resource_version: str,
                      timeout: float) -> WatchStream:
        """A watch of one PodPort, events carrying the raw object."""
        seconds = max(1, int(timeout + 0.999))
        raw = self._request("GET", self._podports(namespace), query=[
            ("fieldSelector", f"metadata.name={name}"), ("watch", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", seconds)],
            timeout=(self.request_timeout, seconds + self.request_timeout))
        return WatchStream(raw, lambda obj: obj)

    def get_podport(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self._json("GET",
                                             self._podports(namespace, name))
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def create_podport(self, namespace: str, obj: Mapping[str, Any]
                       ) -> dict[str, Any]:
        """Create; 409 (K8sPermanent) when one of that name exists."""
        out: dict[str, Any] = self._json("POST", self._podports(namespace),
                                         body=dict(obj))
        return out

    def replace_podport(self, namespace: str, name: str,
                        obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace; ``metadata.resourceVersion`` in ``obj`` is the
        precondition (409 when it changed meanwhile)."""
        out: dict[str, Any] = self._json(
            "PUT", self._podports(namespace, name), body=dict(obj))
        return out

    def delete_podport(self, namespace: str, name: str,
                       uid: str = "") -> bool:
        """Delete (with ``uid`` as precondition); False if already gone."""
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self._read(self._request("DELETE", self._podports(namespace, name),
                                     body=body))
        except K8sPermanent as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def namespace_uid(self, name: str) -> str:
        """The UID of a namespace (the controller's default cluster id)."""
        data = self._json("GET", f"/api/v1/namespaces/{quote(name, '')}")
        return str((data.get("metadata") or {}).get("uid") or "")

    def probe_watch(self, timeout: float = 2.0) -> tuple[bool, str]:
        """Can pods be watched? Opens a one-second watch and closes it once
        the API has answered it with 200 (RBAC and the watch cache work)."""
        try:
            raw = self._request("GET", "/api/v1/pods", query=[
                ("watch", "true"), ("timeoutSeconds", 1), ("limit", 1)],
                timeout=(timeout, timeout))
        except K8sError as exc:
            return False, str(exc)
        raw.close()
        raw.release_conn()
        return True, "pods watchable"

    # -- leases (leader election, the client library's Lease API) ---------------
    def _leases(self) -> Any:
        from kubernetes import client
        return client.CoordinationV1Api(self._api)

    def _lease_call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, _request_timeout=(self.request_timeout,
                                                 self.request_timeout), **kwargs)
        except _api_exception() as exc:
            raise from_status(exc.status or 0, f"{what}: {exc.reason}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise K8sTemporary(f"{what}: {exc}") from exc

    @staticmethod
    def _lease_record(lease: Any) -> LeaseRecord:
        spec = lease.spec
        renewed = spec.renew_time or spec.acquire_time
        return LeaseRecord(
            holder=spec.holder_identity or "",
            renew_time=renewed.timestamp() if renewed else 0.0,
            duration=int(spec.lease_duration_seconds or 0),
            transitions=int(spec.lease_transitions or 0),
            resource_version=lease.metadata.resource_version or "")

    def read_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            lease = self._lease_call("read lease", self._leases().read_namespaced_lease,
                                     name, namespace)
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return self._lease_record(lease)

    def write_lease(self, namespace: str, name: str, *, holder: str,
                    duration: int, transitions: int, acquired: bool,
                    resource_version: str | None) -> LeaseRecord:
        """Create (``resource_version`` None) or replace the Lease; a
        replace carries the version read, so two candidates never both win
        (the loser gets 409)."""
        import datetime

        from kubernetes import client
        now = datetime.datetime.now(datetime.UTC)
        spec = client.V1LeaseSpec(
            holder_identity=holder, lease_duration_seconds=duration,
            lease_transitions=transitions, renew_time=now,
            acquire_time=now if acquired else None)
        meta = client.V1ObjectMeta(name=name, namespace=namespace,
                                   resource_version=resource_version)
        body = client.V1Lease(metadata=meta, spec=spec)
        api = self._leases()
        if resource_version is None:
            lease = self._lease_call("create lease", api.create_namespaced_lease,
                                     namespace, body)
        else:
            lease = self._lease_call("replace lease", api.replace_namespaced_lease,
                                     name, namespace, body)
        return self._lease_record(lease)

    # -- node ------------------------------------------------------------------
    def get_node(self) -> dict[str, Any]:
        node: dict[str, Any] = self._json("GET", f"/api/v1/nodes/{quote(self.node, '')}")
        return node

    def pod_cidr(self) -> str | None:
        return (self.get_node().get("spec") or {}).get("podCIDR") or None

    def patch_node_condition(self, condition: Mapping[str, Any]) -> None:
        """Set one status condition; strategic merge keys conditions by type."""
        self._json("PATCH", f"/api/v1/nodes/{quote(self.node, '')}/status",
                   body={"status": {"conditions": [dict(condition)]}},
                   content_type="application/strategic-merge-patch+json")

    # -- events (kubernetes.events: Events on this Node) ----------------------
    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self._json("POST", f"/api/v1/namespaces/{quote(namespace, '')}/events",
                   body=dict(event))

    def patch_event(self, namespace: str, name: str,
                    patch: Mapping[str, Any]) -> None:
        """Update a repeated Event (count, lastTimestamp, message)."""
        self._json("PATCH", f"/api/v1/namespaces/{quote(namespace, '')}"
                            f"/events/{quote(name, '')}", body=dict(patch),
                   content_type="application/strategic-merge-patch+json")

    # -- health ----------------------------------------------------------------
    def probe(self, timeout: float = 2.0) -> tuple[bool, str]:
        """GET /readyz (older servers: /healthz) within ``timeout``."""
        for path in ("/readyz", "/healthz"):
            try:
                self._read(self._request("GET", path,
                                         timeout=(timeout, timeout)))
                return True, f"{path} ok"
            except K8sPermanent as exc:
                if exc.status == 404 and path == "/readyz":
                    continue
                return False, str(exc)
            except K8sError as exc:
                return False, str(exc)
        return False, "no health endpoint"  # pragma: no cover
