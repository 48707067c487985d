"""The ``network_policy`` handler's build function (its entry point).

Every collaborator of :class:`~.handler.PolicyHandler` is built here,
once the process's clients exist (:class:`~kuryr_supervisor.controller.
runtime.Runtime`), and passed to a constructor: nothing is wired after
construction. The cluster's names come from ``[controller] cluster_id``
or, as the other handlers', the kube-system namespace's UID (read once,
when the first pass needs it); the nodes' own addresses from the
handler's watch of the Nodes (:mod:`.book`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kuryr_supervisor.controller.openstack.wire import cluster_tag
from kuryr_supervisor.controller.policy.book import PolicyBook
from kuryr_supervisor.controller.policy.handler import PolicyHandler
from kuryr_supervisor.controller.policy.naming import Naming
from kuryr_supervisor.controller.policy.reconcile import Reconciler
from kuryr_supervisor.controller.policy.report import PolicyReport
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import events
from kuryr_supervisor.kubernetes import nodes as k8s_nodes

LOG = logging.getLogger(__name__)


class ClusterNames:
    """The cluster's :class:`~.naming.Naming` (see the module)."""

    def __init__(self, client: k8s.K8sClient, cluster_id: str = "") -> None:
        self.client = client
        self._naming = Naming(cluster_tag(cluster_id)) if cluster_id \
            else None

    def __call__(self) -> Naming:
        if self._naming is None:
            uid = k8s_nodes.uid(self.client.namespaces.get("kube-system"))
            if not uid:
                raise k8s.K8sTemporary("the kube-system namespace has no UID")
            self._naming = Naming(cluster_tag(uid))
            LOG.info("cluster id: %s (kube-system's UID)", uid)
        return self._naming


def build(rt: Runtime, *, clock: Callable[[], float] = time.monotonic
          ) -> PolicyHandler:
    """The handler of ``rt``'s process; ``clock``: a test's."""
    conf = rt.conf
    client, cloud = rt.kubernetes(), rt.openstack()
    book = PolicyBook()
    report = PolicyReport(events.recorder(client),
                          getattr(rt.ctx.state, "policies", None))
    reconciler = Reconciler(
        conf, book=book, api=cloud, report=report,
        naming=ClusterNames(client, str(conf.controller.cluster_id or "")),
        network_id=str(conf.controller.pod_network_id or ""), clock=clock)
    return PolicyHandler(rt, client=client, book=book, reconciler=reconciler,
                         report=report)
