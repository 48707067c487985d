"""The API calls on coordination.k8s.io/v1 Leases, for :mod:`.lease`'s
leader election.

Unlike the other calls these go through the client library's typed Lease
API (its models carry the RFC 3339 micro-time the Lease needs); the answers
still leave this module as plain :class:`~.wire.LeaseRecord` values.
"""
from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.kubernetes.transport import K8sTransport, mapped_errors
from kuryr_supervisor.kubernetes.wire import K8sPermanent, LeaseRecord


def _record(lease: Any) -> LeaseRecord:
    spec = lease.spec
    renewed = spec.renew_time or spec.acquire_time
    return LeaseRecord(
        holder=spec.holder_identity or "",
        renew_time=renewed.timestamp() if renewed else 0.0,
        duration=int(spec.lease_duration_seconds or 0),
        transitions=int(spec.lease_transitions or 0),
        resource_version=lease.metadata.resource_version or "",
        annotations=dict(lease.metadata.annotations or {}))


class LeaseCalls(K8sTransport):
    """Lease calls, mixed into :class:`~.client.K8sClient`."""

    def _leases(self) -> Any:
        from kubernetes import client
        return client.CoordinationV1Api(self._api)

    def _lease_call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        with mapped_errors(what):
            return call(*args, _request_timeout=(self.request_timeout,
                                                 self.request_timeout), **kwargs)

    def read_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            lease = self._lease_call("read lease", self._leases().read_namespaced_lease,
                                     name, namespace)
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return _record(lease)

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
        from kubernetes import client
        now = datetime.datetime.now(datetime.UTC) if renewed is None else \
            datetime.datetime.fromtimestamp(renewed, datetime.UTC)
        spec = client.V1LeaseSpec(
            holder_identity=holder, lease_duration_seconds=duration,
            lease_transitions=transitions, renew_time=now,
            acquire_time=now if acquired else None)
        meta = client.V1ObjectMeta(name=name, namespace=namespace,
                                   resource_version=resource_version,
                                   annotations=dict(annotations or {}) or None)
        body = client.V1Lease(metadata=meta, spec=spec)
        api = self._leases()
        if resource_version is None:
            lease = self._lease_call("create lease", api.create_namespaced_lease,
                                     namespace, body)
        else:
            lease = self._lease_call("replace lease", api.replace_namespaced_lease,
                                     name, namespace, body)
        return _record(lease)
