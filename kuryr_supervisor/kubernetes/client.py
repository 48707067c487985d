"""The Kubernetes API adapter, as one object per process.

:class:`K8sClient` is the transport (:mod:`.transport`: the connection
pool, deadlines, errors and the write fence, over urllib3 to the endpoint
:mod:`.config` resolves, re-exported here for callers) with this node's
name and one generic client (:class:`~.resource.ResourceClient`) per
resource the daemon uses: ``pods``, ``nodes``, ``namespaces``,
``events``, ``leases``, ``services``, ``endpointslices``,
``networkpolicies``, ``podports``, ``nodenetworks``. Every verb is that client's; what an object means is
its own module's (:mod:`.podport`, :mod:`.nodenetwork`, :mod:`.leases`,
:mod:`.nodes`, :mod:`.events`, :mod:`.services`).
Besides, this node's pods as an informer's source (:attr:`K8sClient.
node_pods`) and the health probes. Answers are decoded by :mod:`.wire`,
whose errors and types are re-exported here too.
"""
from __future__ import annotations

import functools

from kuryr_supervisor.kubernetes import nodenetwork, podport
from kuryr_supervisor.kubernetes.config import (  # noqa: F401 - re-exported
    is_configured,
    make_endpoint,
    node_name,
    preload,
)
from kuryr_supervisor.kubernetes.listing import Listing
from kuryr_supervisor.kubernetes.registry import Pod
from kuryr_supervisor.kubernetes.resource import (
    ENDPOINTSLICES,
    EVENTS,
    LEASES,
    NAMESPACES,
    NETWORKPOLICIES,
    NODES,
    PODS,
    SERVICES,
    ResourceClient,
)
from kuryr_supervisor.kubernetes.transport import K8sTransport
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


class K8sClient(K8sTransport):
    """The transport, this node's name, and the resources (see the
    module); all share one connection pool (and one fence)."""

    @functools.cached_property
    def pods(self) -> ResourceClient:
        return ResourceClient(self, PODS)

    @functools.cached_property
    def nodes(self) -> ResourceClient:
        return ResourceClient(self, NODES)

    @functools.cached_property
    def namespaces(self) -> ResourceClient:
        return ResourceClient(self, NAMESPACES)

    @functools.cached_property
    def events(self) -> ResourceClient:
        return ResourceClient(self, EVENTS)

    @functools.cached_property
    def leases(self) -> ResourceClient:
        return ResourceClient(self, LEASES)

    @functools.cached_property
    def services(self) -> ResourceClient:
        return ResourceClient(self, SERVICES)

    @functools.cached_property
    def endpointslices(self) -> ResourceClient:
        return ResourceClient(self, ENDPOINTSLICES)

    @functools.cached_property
    def networkpolicies(self) -> ResourceClient:
        return ResourceClient(self, NETWORKPOLICIES)

    @functools.cached_property
    def podports(self) -> ResourceClient:
        return ResourceClient(self, podport.RESOURCE)

    @functools.cached_property
    def nodenetworks(self) -> ResourceClient:
        return ResourceClient(self, nodenetwork.RESOURCE)

    @property
    def node_pods(self) -> Listing[Pod]:
        """This node's pods (``spec.nodeName``), decoded as the registry
        keeps them: the Watcher's source."""
        return Listing(self.pods, pod_from_json,
                       field_selector=f"spec.nodeName={self.node}")

    # -- health ----------------------------------------------------------------
    def probe_watch(self, timeout: float = 2.0) -> tuple[bool, str]:
        """Can pods be watched? Opens a one-second watch and closes it once
        the API has answered it with 200 (RBAC and the watch cache work)."""
        try:
            raw = self.request("GET", PODS.path(), query=[
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
                self.read_body(self.request("GET", path,
                                            timeout=(timeout, timeout)))
                return True, f"{path} ok"
            except K8sPermanent as exc:
                if exc.status == 404 and path == "/readyz":
                    continue
                return False, str(exc)
            except K8sError as exc:
                return False, str(exc)
        return False, "no health endpoint"  # pragma: no cover
