"""The cluster as the services handler names it, and what it asks the
API before it deletes: the cluster's tag (``[controller] cluster_id``, or
the kube-system namespace's UID, read once, as the port handler's), and
whether a Service is gone (a consistent read of the one a load
balancer's description names: its list may lag, a watch cache's)."""
from __future__ import annotations

import logging

from kuryr_supervisor.controller.openstack.wire import cluster_tag
from kuryr_supervisor.controller.services.inventory import Naming
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import nodes as k8s_nodes

LOG = logging.getLogger(__name__)


class Cluster:
    """See the module; ``cluster_id`` as configured ("": kube-system's
    UID)."""

    def __init__(self, client: k8s.K8sClient, cluster_id: str = "") -> None:
        self.client = client
        self._naming = Naming(cluster_tag(cluster_id)) if cluster_id \
            else None

    def naming(self) -> Naming:
        """The cluster's tags and names (an API error: raised, asked again
        next time)."""
        if self._naming is None:
            uid = k8s_nodes.uid(self.client.namespaces.get("kube-system"))
            if not uid:
                raise k8s.K8sTemporary("the kube-system namespace has no UID")
            self._naming = Naming(cluster_tag(uid))
            LOG.info("cluster id: %s (kube-system's UID)", uid)
        return self._naming

    def gone(self, uid: str, described: str) -> bool:
        """Whether Service ``uid`` (``namespace/name`` as its load
        balancer's description says) is gone: the API has no Service of
        that name, or one of another UID. An API error, or a description
        that names none: not proven gone."""
        namespace, _, name = described.partition("/")
        if not namespace or not name:
            LOG.warning("load balancer of Service %s names no Service (%r): "
                        "left alone", uid, described)
            return False
        try:
            obj = self.client.services.get(name, namespace=namespace)
        except (k8s.K8sError, ValueError) as exc:
            LOG.info("Service %s/%s not confirmed gone: %s", namespace,
                     name, exc)
            return False
        return obj is None or k8s_nodes.uid(obj) != uid
