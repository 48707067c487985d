"""Every pod of the cluster, as the controller role sees them.

A :class:`~kuryr_supervisor.kubernetes.podwatch.PodWatch` source (list, then
watch, cluster-wide) whose pods carry what a handler decides on: the node,
host networking, deletion, the annotations. The CNI role's Watcher keeps
its own node-scoped source; both share the loop's resume and relist logic.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.wire import WatchStream


@dataclasses.dataclass(frozen=True)
class ClusterPod:
    namespace: str
    name: str
    uid: str
    node: str
    host_network: bool
    deletion_timestamp: str | None
    phase: str
    annotations: Mapping[str, str]

    @property
    def needs_port(self) -> bool:
        """Scheduled, on the pod network, not finished or being deleted."""
        return bool(self.node and not self.host_network
                    and self.deletion_timestamp is None
                    and self.phase not in ("Succeeded", "Failed"))


def cluster_pod(obj: Mapping[str, Any]) -> ClusterPod:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return ClusterPod(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")), node=str(spec.get("nodeName") or ""),
        host_network=bool(spec.get("hostNetwork")),
        deletion_timestamp=meta.get("deletionTimestamp"),
        phase=str((obj.get("status") or {}).get("phase") or ""),
        annotations={str(k): str(v) for k, v in annotations.items()})


class ClusterPods:
    """PodWatch's source over every namespace and node."""

    def __init__(self, client: K8sClient) -> None:
        self.client = client

    def list_pods(self, resource_version: str = ""
                  ) -> tuple[list[ClusterPod], str]:
        items, rv = self.client.list_all_pods(resource_version)
        return [cluster_pod(item) for item in items], rv

    def watch_pods(self, resource_version: str) -> WatchStream:
        return self.client.watch_all_pods(resource_version, cluster_pod)
