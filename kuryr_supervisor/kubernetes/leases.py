"""The coordination.k8s.io/v1 Lease as :mod:`.lease`'s leader election
and the controller's create announcer read and write it.

The Lease is written as JSON with its times in the RFC 3339 micro-time
the API requires (``2006-01-02T15:04:05.000000Z``), through the generic
client (:data:`~.resource.LEASES`); the answers leave this module as plain
:class:`~.wire.LeaseRecord` values.
"""
from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.kubernetes.resource import LEASES, ResourceClient
from kuryr_supervisor.kubernetes.wire import K8sTemporary, LeaseRecord


def micro_time(epoch: float) -> str:
    """A MicroTime as the API writes it: UTC, six fractional digits."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(value: Any) -> float:
    """Seconds since the epoch of an RFC 3339 time; 0 when absent."""
    if not value:
        return 0.0
    try:
        moment = datetime.datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise K8sTemporary(f"lease: undecodable time {value!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def lease_record(lease: Mapping[str, Any]) -> LeaseRecord:
    """The fields leader election reads, from a Lease's JSON."""
    spec, meta = lease.get("spec") or {}, lease.get("metadata") or {}
    try:
        return LeaseRecord(
            holder=str(spec.get("holderIdentity") or ""),
            renew_time=_epoch(spec.get("renewTime") or spec.get("acquireTime")),
            duration=int(spec.get("leaseDurationSeconds") or 0),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str(meta.get("resourceVersion") or ""),
            annotations={str(k): str(v) for k, v in
                         (meta.get("annotations") or {}).items()})
    except (TypeError, ValueError, AttributeError) as exc:
        raise K8sTemporary(f"lease: undecodable answer: {exc}") from exc


def lease_body(namespace: str, name: str, *, holder: str, duration: int,
               transitions: int, acquired: bool, renewed: float,
               resource_version: str | None,
               annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Lease to write; ``resource_version`` (None: a new Lease) is
    the write's precondition."""
    now = micro_time(renewed)
    spec: dict[str, Any] = {"holderIdentity": holder,
                            "leaseDurationSeconds": duration,
                            "leaseTransitions": transitions,
                            "renewTime": now}
    if acquired:
        spec["acquireTime"] = now
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": LEASES.api_version, "kind": LEASES.kind,
            "metadata": meta, "spec": spec}


def read_lease(leases: ResourceClient, namespace: str,
               name: str) -> LeaseRecord | None:
    """The Lease, or None when there is none."""
    lease = leases.get(name, namespace=namespace)
    return None if lease is None else lease_record(lease)


def write_lease(leases: ResourceClient, namespace: str, name: str, *,
                holder: str, duration: int, transitions: int, acquired: bool,
                resource_version: str | None, renewed: float | None = None,
                annotations: Mapping[str, str] | None = None) -> LeaseRecord:
    """Create (``resource_version`` None) or replace the Lease; a
    replace carries the version read, so two candidates never both win
    (the loser gets 409). ``renewed``: the renewTime (epoch seconds; now
    by default)."""
    body = lease_body(
        namespace, name, holder=holder, duration=duration,
        transitions=transitions, acquired=acquired,
        renewed=datetime.datetime.now(datetime.UTC).timestamp()
        if renewed is None else renewed,
        resource_version=resource_version, annotations=annotations)
    if resource_version is None:
        return lease_record(leases.create(body, namespace=namespace))
    return lease_record(leases.replace(name, body, namespace=namespace))
