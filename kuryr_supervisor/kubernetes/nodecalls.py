"""The API calls on Node objects, the Events about them, and the
namespace UID that names the cluster.

The core/v1 objects the daemon reads or writes besides pods: this node's
pod CIDR and status condition (:mod:`.nodecondition`), every Node's
conditions for the controller's network judge, the Events of
:mod:`.events`, and the controller's default cluster id.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from kuryr_supervisor.kubernetes.transport import K8sTransport
from kuryr_supervisor.kubernetes.wire import K8sPermanent

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
        self.patch_node_conditions(self.node, [condition])

    # -- every node (the controller's network judge) ---------------------------
    def get_named_node(self, name: str) -> dict[str, Any] | None:
        """The Node ``name``, or None if it does not exist (404)."""
        try:
            node: dict[str, Any] = self._json(
                "GET", f"/api/v1/nodes/{quote(name, '')}")
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return node

    def page_nodes(self, *, limit: int, token: str = ""
                   ) -> tuple[list[dict[str, Any]], str]:
        """One page of every Node and the next page's token ("" at the end)."""
        query = [("limit", str(limit))]
        if token:
            query.append(("continue", token))
        data = self._json("GET", "/api/v1/nodes", query=query)
        return (list(data.get("items") or []),
                str((data.get("metadata") or {}).get("continue") or ""))

    def patch_node_conditions(self, name: str,
                              conditions: Sequence[Mapping[str, Any]], *,
                              resource_version: str = "") -> dict[str, Any]:
        """Set (or, with ``"$patch": "delete"``, remove) status conditions
        of Node ``name`` by type (strategic merge); ``resource_version``
        makes it conditional (409 when the Node changed since it was read).
        Returns the Node as patched."""
        body: dict[str, Any] = {"status": {"conditions": [
            dict(c) for c in conditions]}}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        node: dict[str, Any] = self._json(
            "PATCH", f"/api/v1/nodes/{quote(name, '')}/status", body=body,
            content_type=_MERGE_PATCH)
        return node

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
