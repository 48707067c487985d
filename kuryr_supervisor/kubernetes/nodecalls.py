"""The API calls on this node's Node object, the Events about it, and the
namespace UID that names the cluster.

The core/v1 objects the daemon reads or writes besides pods: the Node's pod
CIDR and status condition (:mod:`.nodecondition`), the Events of
:mod:`.events`, and the controller's default cluster id.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from kuryr_supervisor.kubernetes.transport import K8sTransport

_MERGE_PATCH = "application/strategic-merge-patch+json"


class NodeCalls(K8sTransport):
    """Node, Event and Namespace calls, mixed into :class:`~.client.K8sClient`."""

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
                   content_type=_MERGE_PATCH)

    # -- events (kubernetes.events: Events on this Node) ----------------------
    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self._json("POST", f"/api/v1/namespaces/{quote(namespace, '')}/events",
                   body=dict(event))

    def patch_event(self, namespace: str, name: str,
                    patch: Mapping[str, Any]) -> None:
        """Update a repeated Event (count, lastTimestamp, message)."""
        self._json("PATCH", f"/api/v1/namespaces/{quote(namespace, '')}"
                            f"/events/{quote(name, '')}", body=dict(patch),
                   content_type=_MERGE_PATCH)

    # -- namespaces --------------------------------------------------------------
    def namespace_uid(self, name: str) -> str:
        """The UID of a namespace (the controller's default cluster id)."""
        data = self._json("GET", f"/api/v1/namespaces/{quote(name, '')}")
        return str((data.get("metadata") or {}).get("uid") or "")
