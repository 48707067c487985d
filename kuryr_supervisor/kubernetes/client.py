"""The Kubernetes API adapter: the calls the daemon makes, as one client.

:class:`K8sClient` combines the calls on pods and the health probes (here)
with those on PodPorts (:mod:`.podportcalls`), Leases (:mod:`.leasecalls`),
the Nodes, their Events and namespaces (:mod:`.nodecalls`) and the
NodeNetworks (:mod:`.nodenetworkcalls`), all over one
transport (:mod:`.transport`: the connection pool, deadlines and errors,
over urllib3 to the endpoint :mod:`.config` resolves, re-exported here for
callers); answers are decoded by :mod:`.wire`, whose errors and types are
re-exported here too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from kuryr_supervisor.kubernetes.config import (  # noqa: F401 - re-exported
    is_configured,
    make_endpoint,
    node_name,
    preload,
)
from kuryr_supervisor.kubernetes.leasecalls import LeaseCalls
from kuryr_supervisor.kubernetes.nodecalls import NodeCalls
from kuryr_supervisor.kubernetes.nodenetworkcalls import NodeNetworkCalls
from kuryr_supervisor.kubernetes.podportcalls import PodPortCalls
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
    import urllib3


def _versioned(resource_version: str) -> list[tuple[str, str]]:
    """The query that asks for ``resource_version`` (see
    :meth:`K8sClient.list_pods`)."""
    if not resource_version:
        return []
    if resource_version == "0":
        return [("resourceVersion", "0")]
    return [("resourceVersion", resource_version),
            ("resourceVersionMatch", "NotOlderThan")]


class K8sClient(PodPortCalls, LeaseCalls, NodeCalls, NodeNetworkCalls):
    """The calls the daemon makes, on this node's pods and Node object.

    Mixins over one transport, not small classes each holding it: every
    caller keeps calling ``client.create_podport(...)`` or
    ``client.read_lease(...)`` on the one object it was given, and the
    structural types the callers declare (:class:`~.podport.PodPortSource`,
    :mod:`.podwatch`'s) keep fitting it; separate classes would have either
    changed every caller (``client.podports.create(...)``) or repeated every
    signature here as a forwarding method. All share one connection pool.
    """

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
        data = self._json("GET", "/api/v1/pods",
                          query=[*query, *_versioned(resource_version)])
        return (list(data.get("items") or []),
                (data.get("metadata") or {}).get("resourceVersion", ""))

    def watch_pods(self, resource_version: str) -> WatchStream:
        """Open a bounded watch resuming after ``resource_version``."""
        return WatchStream(self._watch([self._selector], resource_version))

    def _watch(self, query: list[tuple[str, str]], resource_version: str
               ) -> urllib3.HTTPResponse:
        """A bounded watch of the pods ``query`` selects, with bookmarks."""
        return self._request("GET", "/api/v1/pods", query=[
            *query, ("watch", "true"), ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.watch_timeout)],
            timeout=(self.request_timeout, self.watch_read_timeout))

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
        query = [("limit", str(limit))]
        query += [("continue", token)] if token else _versioned(resource_version)
        data = self._json("GET", "/api/v1/pods", query=query)
        meta = data.get("metadata") or {}
        return (list(data.get("items") or []), meta.get("resourceVersion", ""),
                str(meta.get("continue") or ""))

    def watch_all_pods(self, resource_version: str,
                       decode: Any) -> WatchStream:
        """A bounded watch of every pod, events decoded with ``decode``."""
        return WatchStream(self._watch([], resource_version), decode)

    # -- health ----------------------------------------------------------------
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
