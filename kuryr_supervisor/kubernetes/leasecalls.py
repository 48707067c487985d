"""The API calls on coordination.k8s.io/v1 Leases, for :mod:`.lease`'s
leader election.

The Lease is written as JSON with its times in the RFC 3339 micro-time
the API requires (``2006-01-02T15:04:05.000000Z``); the answers leave this
module as plain :class:`~.wire.LeaseRecord` values.
"""
from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from kuryr_supervisor.kubernetes.transport import K8sTransport
from kuryr_supervisor.kubernetes.wire import K8sPermanent, K8sTemporary, LeaseRecord


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


def _leases(namespace: str, name: str = "") -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, '')}/leases"
    return f"{path}/{quote(name, '')}" if name else path


class LeaseCalls(K8sTransport):
    """Lease calls, mixed into :class:`~.client.K8sClient`."""

    def read_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            lease = self._json("GET", _leases(namespace, name))
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return lease_record(lease)

    def write_lease(self, namespace: str, name: str, *, holder: str,
                    duration: int, transitions: int, acquired: bool,
                    resource_version: str | None,
                    renewed: float | None = None,
                    annotations: Mapping[str, str] | None = None
                    ) -> LeaseRecord:
        """Create (``resource_version`` None) or replace the Lease; a
        replace carries the version read, so two candidates never both win
        (the loser gets 409). ``renewed``: the renewTime (epoch seconds;
        now by default)."""
        now = micro_time(datetime.datetime.now(datetime.UTC).timestamp()
                         if renewed is None else renewed)
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
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": meta, "spec": spec}
        if resource_version is None:
            lease = self._json("POST", _leases(namespace), body=body)
        else:
            lease = self._json("PUT", _leases(namespace, name), body=body)
        return lease_record(lease)
