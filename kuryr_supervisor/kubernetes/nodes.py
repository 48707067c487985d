"""Node objects as the daemon reads and writes them, and the namespace
UID that names the cluster.

This node's pod CIDR, the status conditions it publishes
(:mod:`.nodecondition`) and every Node's conditions the controller's
network judge writes (:mod:`.netconditions`), all through the generic
client (:data:`~.resource.NODES`): a condition is set by a strategic
merge of the status, which keys the conditions by type.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kuryr_supervisor.kubernetes.resource import STRATEGIC_MERGE_PATCH, ResourceClient


def pod_cidr(node: Mapping[str, Any] | None) -> str | None:
    """The Node's ``spec.podCIDR`` (None: no such Node, or none yet)."""
    return ((node or {}).get("spec") or {}).get("podCIDR") or None


def conditions_patch(conditions: Sequence[Mapping[str, Any]], *,
                     resource_version: str = "") -> dict[str, Any]:
    """The strategic merge patch that sets (or, with ``"$patch":
    "delete"``, removes) ``conditions`` by type; ``resource_version``
    makes it conditional (409 when the Node changed since it was read)."""
    body: dict[str, Any] = {"status": {"conditions": [
        dict(c) for c in conditions]}}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return body


def patch_conditions(nodes: ResourceClient, name: str,
                     conditions: Sequence[Mapping[str, Any]], *,
                     resource_version: str = "") -> dict[str, Any]:
    """Set (or remove) status conditions of Node ``name`` by type (see
    :func:`conditions_patch`); returns the Node as patched."""
    return nodes.patch(name, conditions_patch(
        conditions, resource_version=resource_version),
        content_type=STRATEGIC_MERGE_PATCH, subresource="status")


def condition_setter(nodes: ResourceClient, name: str
                     ) -> Callable[[Mapping[str, Any]], Any]:
    """condition -> set on Node ``name`` (this node's, for
    :class:`~.nodecondition.NodeConditionPublisher`)."""
    def set_condition(condition: Mapping[str, Any]) -> Any:
        return patch_conditions(nodes, name, [condition])
    return set_condition


def uid(obj: Mapping[str, Any] | None) -> str:
    """An object's UID ("" when there is none), e.g. the kube-system
    namespace's, the controller's default cluster id."""
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")
