"""Pods that arrive together get their Neutron ports in one request.

:class:`Batch` holds the UIDs of pods waiting for a port until the batch is
full (:data:`MAX_PORTS`) or its oldest pod has waited :data:`WINDOW`; then
:func:`create` makes their ports with Neutron's bulk create (one ``POST
/v2.0/ports`` with ``{"ports": [...]}``), in chunks of at most
:data:`MAX_PORTS`.

Why these numbers: 50 ms is what a pod may wait for company. It is small
beside the 2 s a burst's slowest pod may take and beside a real Neutron
port create (tens to hundreds of milliseconds, most of it per request:
authentication, policy, the DB transaction), yet long enough that pods a
ReplicaSet scale-up or a node drain creates together (the scheduler binds
hundreds a second) land in one request. 100 ports bound one request: one
DB transaction and IP allocation in Neutron, about 60 KiB of answer, one
second of a slow Neutron; 10,000 pods are 100 requests.

Failures, given that a bulk create is all or nothing: a chunk Neutron
refuses (a 4xx, the port quota included) created nothing, so its ports are
then created one by one: one bad request or the last of the quota holds
back only its own pods. A chunk whose answer is lost (a timeout, a 5xx,
garbage) may or may not exist: its pods get the error, and the caller looks
their ports up in Neutron before creating again (no port doubled, none
leaked). Once Neutron is out, the rest is not tried.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kuryr_supervisor.controller import openstack as osa

#: Longest wait of a pod for others to share its request (seconds).
WINDOW = 0.05
#: Most ports in one bulk request.
MAX_PORTS = 100


class Batch:
    """Pod UIDs waiting for a port, in arrival order."""

    def __init__(self, *, window: float = WINDOW, size: int = MAX_PORTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window, self.size, self._clock = window, size, clock
        self._uids: dict[str, None] = {}
        self._since = 0.0

    def __len__(self) -> int:
        return len(self._uids)

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids

    def add(self, uid: str) -> None:
        if not self._uids:
            self._since = self._clock()
        self._uids[uid] = None

    def discard(self, uid: str) -> None:
        self._uids.pop(uid, None)

    def wake_in(self) -> float:
        """Seconds until the batch is due (inf when empty, 0 when due)."""
        if not self._uids:
            return float("inf")
        if len(self._uids) >= self.size:
            return 0.0
        return max(0.0, self._since + self.window - self._clock())

    def due(self) -> bool:
        return bool(self._uids) and self.wake_in() <= 0.0

    def take(self) -> list[str]:
        uids, self._uids = list(self._uids), {}
        return uids


Outcome = tuple[dict[str, osa.Port], dict[str, Exception]]


def create(cloud: osa.OpenStack, devices: Sequence[tuple[str, str]], *,
           network_id: str, subnet_id: str, tag: str,
           size: int = MAX_PORTS) -> Outcome:
    """Ports for ``devices`` ((port name, pod UID) pairs): (UID -> port
    made, UID -> why not). See the module for the failure rules."""
    made: dict[str, osa.Port] = {}
    failed: dict[str, Exception] = {}
    tags = [tag] if tag else []
    out: Exception | None = None           # Neutron is out: try no more
    for start in range(0, len(devices), size):
        chunk = devices[start:start + size]
        if out is not None:
            failed.update((uid, out) for _, uid in chunk)
            continue
        try:
            ports = cloud.create_ports(network_id=network_id,
                                       subnet_id=subnet_id, devices=chunk,
                                       tags=tags)
        except osa.OpenStackRefused as exc:
            out = _one_by_one(cloud, chunk, exc, made, failed,
                              network_id=network_id, subnet_id=subnet_id,
                              tags=tags)
            continue
        except Exception as exc:  # noqa: BLE001 - lost answer: handed back
            out = exc
            failed.update((uid, exc) for _, uid in chunk)
            continue
        made.update(zip((uid for _, uid in chunk), ports, strict=True))
    return made, failed


def _one_by_one(cloud: osa.OpenStack, chunk: Sequence[tuple[str, str]],
                refused: osa.OpenStackRefused, made: dict[str, osa.Port],
                failed: dict[str, Exception], *, network_id: str,
                subnet_id: str, tags: list[str]) -> Exception | None:
    """After a refused bulk (nothing created): each port on its own.
    Returns the error that should stop further creates, if any."""
    if len(chunk) == 1:
        failed[chunk[0][1]] = refused
        return refused if isinstance(refused, osa.QuotaExceeded) else None
    for i, (name, uid) in enumerate(chunk):
        try:
            made[uid] = cloud.create_port(network_id=network_id,
                                          subnet_id=subnet_id, name=name,
                                          device_id=uid, tags=tags)
        except osa.OpenStackRefused as exc:
            failed[uid] = exc
            if isinstance(exc, osa.QuotaExceeded):
                failed.update((u, exc) for _, u in chunk[i + 1:])
                return exc
        except Exception as exc:  # noqa: BLE001 - lost answer: handed back
            failed.update((u, exc) for _, u in chunk[i:])
            return exc
    return None
