"""Every pod of the cluster, as the controller role sees them.

An :class:`~kuryr_supervisor.kubernetes.informer.Informer` source (list,
then watch, cluster-wide: a :class:`~.listing.Listing` of every pod) whose
pods carry what a handler decides on: the node, host networking,
deletion, the phase (a finished pod's port is given back:
:attr:`ClusterPod.finished`). The CNI role's Watcher keeps its own
node-scoped source (:attr:`~.client.K8sClient.node_pods`); both share the
loop's resume and relist logic.

Lean at scale: the list is read in pages of :data:`PAGE_SIZE` and each page
decoded into :class:`ClusterPod` (slots, eight short fields, namespace and
node names interned) before the next is read, so 10,000 pods never exist
at once as decoded JSON (a real pod is 3-8 KiB of it, ten times that as
Python objects); no annotation, label or container is kept.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from typing import Any

from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.listing import Listing

#: Pods per page of the list: one page is a few MiB of JSON at most.
PAGE_SIZE = 500
#: A pod's terminal phases: its containers have stopped for good (a Job's,
#: a CronJob's, an evicted pod), and Kubernetes never moves a pod out of
#: them; the pod object stays until someone deletes it.
FINISHED = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterPod:
    namespace: str
    name: str
    uid: str
    node: str
    host_network: bool
    deletion_timestamp: str | None
    phase: str
    #: What a handler decodes more of the pod, where it needs more (the
    #: port handler beside the network_policy handler: the labels and
    #: named ports its policies select on); None elsewhere.
    model: Any = dataclasses.field(default=None, compare=False)

    @property
    def finished(self) -> bool:
        """In a terminal phase (:data:`FINISHED`): its network is used no
        more (the kubelet tears its sandbox down, CNI DEL), and a
        finished pod does not count against its namespace's pod quota,
        so what it holds must be given back. Pending, Running, Unknown
        (its node unreachable) and no phase yet are not finished."""
        return self.phase in FINISHED

    @property
    def needs_port(self) -> bool:
        """Scheduled, on the pod network, not finished or being deleted."""
        return bool(self.node and not self.host_network
                    and self.deletion_timestamp is None
                    and not self.finished)


def cluster_pod(obj: Mapping[str, Any]) -> ClusterPod:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    deleted = meta.get("deletionTimestamp")
    return ClusterPod(
        namespace=sys.intern(str(meta.get("namespace", ""))),
        name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        node=sys.intern(str(spec.get("nodeName") or "")),
        host_network=bool(spec.get("hostNetwork")),
        deletion_timestamp=None if deleted is None else str(deleted),
        phase=sys.intern(str((obj.get("status") or {}).get("phase") or "")))


class ClusterPods(Listing[ClusterPod]):
    """The informer's source over every namespace and node."""

    def __init__(self, client: K8sClient, *, page_size: int = PAGE_SIZE,
                 beat: Callable[[], None] = lambda: None,
                 decode: Callable[[Mapping[str, Any]], ClusterPod] = cluster_pod
                 ) -> None:
        """``beat`` is called between pages (a list of 10,000 pods is 20
        requests: the loop's heartbeat must not wait for all of them);
        ``decode``: a handler's that keeps more (:attr:`ClusterPod.model`)."""
        super().__init__(client.pods, decode, page_size=page_size,
                         beat=beat)
