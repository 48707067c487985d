"""The PodPort custom resource: a pod's Neutron port, written by the
controller alone, read by the CNI role.

``podports.kuryr-supervisor.openstack.org/v1``, kind ``PodPort``: one per
pod, in the pod's namespace, named after the pod, with an ownerReference to
the pod (its UID), so the garbage collector deletes it with the pod. The
group is a subdomain of the project's own (``kuryr-supervisor`` under
openstack.org, the prefix of its annotations), so it never collides with
Kuryr's ``kuryrports.openstack.org``. The spec::

    {"portId": "...", "podUid": "...", "mac": "fa:16:3e:..",
     "address": "10.20.0.12/24", "gateway": "10.20.0.1"}

Why a resource and not the pod annotation: a pod's owner can edit its
annotations, but RBAC gives tenants no verb on PodPorts (only the
controller's ServiceAccount may write them, the CNI role's may only read
them), the way Kuryr moved to KuryrPort. A PodPort is still checked here
(format, and ownerReference UID equal to ``podUid``) and by the CNI role
against its own configuration before anything is bound.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from kuryr_supervisor.kubernetes.portdata import PortData
from kuryr_supervisor.kubernetes.resource import Resource, ResourceClient

GROUP = "kuryr-supervisor.openstack.org"
VERSION = "v1"
PLURAL = "podports"
KIND = "PodPort"
API_VERSION = f"{GROUP}/{VERSION}"
#: The resource, for the generic client (:mod:`.resource`).
RESOURCE = Resource(GROUP, VERSION, PLURAL, KIND, namespaced=True)

__all__ = ["PortData"]     # the port data a PodPort carries (its checks)
#: The label naming the node of a PodPort's pod (where its port is bound):
#: a node watches its own pods' PodPorts by it, and re-points a pod's
#: interface when its port was made again under a new id.
NODE_LABEL = f"{GROUP}/node"


def node_label(node: str) -> str:
    """The :data:`NODE_LABEL` value for ``node``: its name, or, for a
    name longer than a label value may be (63), a prefix and a hash."""
    if len(node) <= 63:
        return node
    digest = hashlib.sha256(node.encode()).hexdigest()[:16]
    return f"{node[:46].rstrip('.-')}-{digest}"


def body(namespace: str, pod_name: str, data: PortData,
         node: str = "") -> dict[str, Any]:
    """The PodPort object for a pod, owned by it, labelled with its
    ``node`` when known."""
    labels = {NODE_LABEL: node_label(node)} if node else {}
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {
            "name": pod_name, "namespace": namespace,
            **({"labels": labels} if labels else {}),
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Pod", "name": pod_name,
                "uid": data.pod_uid, "controller": True,
                "blockOwnerDeletion": False}]},
        "spec": {"portId": data.port_id, "podUid": data.pod_uid,
                 "mac": data.mac, "address": str(data.address),
                 "gateway": str(data.gateway)}}


def status_patch(status: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch of the status subresource that sets ``status``'s
    fields (``portStatus`` the controller's, ``boundAt`` the node's) and
    leaves the others."""
    return {"status": dict(status)}


def owner_uid(obj: Mapping[str, Any]) -> str:
    """The UID of the Pod that owns the object ("" if none)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Pod" and \
                ref.get("apiVersion") == "v1":
            return str(ref.get("uid") or "")
    return ""


def from_object(obj: Mapping[str, Any]) -> PortData:
    """Validate a PodPort; ValueError says what is wrong."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("PodPort has no spec")
    data = PortData.from_mapping(spec)
    if owner_uid(obj) != data.pod_uid:
        raise ValueError("PodPort's owner is not the pod named by podUid")
    return data


def same(obj: Mapping[str, Any], data: PortData) -> bool:
    """The object already says exactly ``data``."""
    try:
        return from_object(obj) == data
    except ValueError:
        return False


Wait = Callable[[str, str, str, float], "PortData | None"]


class Invalid(ValueError):
    """The pod's PodPort exists but is malformed or inconsistent: refused
    at once rather than waited past."""


def _own(obj: Mapping[str, Any] | None, uid: str) -> PortData | None:
    """The PodPort's data if it is for ``uid``; None for an earlier pod's
    PodPort of the same name (waited past: the controller replaces it);
    :class:`Invalid` when it claims this pod but does not hold up."""
    if obj is None:
        return None
    spec = obj.get("spec")
    spec_uid = spec.get("podUid") if isinstance(spec, Mapping) else None
    if uid and uid not in (owner_uid(obj), spec_uid):
        return None
    try:
        data = from_object(obj)
    except ValueError as exc:
        raise Invalid(str(exc)) from exc
    if uid and data.pod_uid != uid:
        raise Invalid(f"podUid {data.pod_uid} is not the pod's UID {uid}")
    return data


#: What the controller says of the port in ``status.portStatus``.
ACTIVE, BINDING_FAILED = "ACTIVE", "BINDING_FAILED"


def port_status(obj: Mapping[str, Any]) -> str:
    """``status.portStatus`` ("" when the controller has not said yet)."""
    status = obj.get("status")
    value = status.get("portStatus") if isinstance(status, Mapping) else ""
    return str(value or "")


def bound_at(obj: Mapping[str, Any]) -> str:
    """``status.boundAt``: when the CNI role bound the pod ("" if not)."""
    status = obj.get("status")
    value = status.get("boundAt") if isinstance(status, Mapping) else ""
    return str(value or "")


def waiter(podports: ResourceClient) -> Wait:
    """(namespace, name, pod uid, seconds) -> the pod's PodPort data,
    waiting up to ``seconds``: one list of that one name, then a watch
    from the list's resourceVersion, so the PodPort is seen the moment the
    controller writes it, with no polling. None when the time is up;
    :class:`Invalid` when the pod's PodPort does not hold up."""
    wait = status_waiter(podports, settled=False)

    def data_only(namespace: str, name: str, uid: str,
                  seconds: float) -> PortData | None:
        found = wait(namespace, name, uid, seconds)
        return found[0] if found is not None else None
    return data_only


StatusWait = Callable[[str, str, str, float], "tuple[PortData, str] | None"]


def _raw(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj


def status_waiter(podports: ResourceClient, *, settled: bool) -> StatusWait:
    """As :func:`waiter`, the port's status beside its data; ``settled``:
    wait until the status is :data:`ACTIVE` or :data:`BINDING_FAILED`."""
    def accept(obj: Mapping[str, Any]) -> bool:
        return not settled or port_status(obj) in (ACTIVE, BINDING_FAILED)

    def wait(namespace: str, name: str, uid: str,
             seconds: float) -> tuple[PortData, str] | None:
        deadline = time.monotonic() + seconds
        one = f"metadata.name={name}"
        listed = podports.page(namespace=namespace, field_selector=one)
        for obj in listed.items:
            found = _own(obj, uid)
            if found is not None and accept(obj):
                return found, port_status(obj)
        if seconds <= 0:
            return None
        stream = podports.watch(listed.resource_version, _raw,
                                namespace=namespace, field_selector=one,
                                bookmarks=False, timeout=seconds)
        try:
            for event in stream:
                if event.type == "DELETED" or event.obj is None:
                    continue
                found = _own(event.obj, uid)
                if found is not None and accept(event.obj):
                    return found, port_status(event.obj)
                if time.monotonic() >= deadline:
                    return None
        finally:
            stream.close()
        return None
    return wait
