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

Pace: :func:`create` cuts the pods into requests sized from Neutron's
measured time per port and sends ``in_flight`` (``[controller]
port_create_requests``) at once, each with a
timeout that grows with its size
(:mod:`~kuryr_supervisor.controller.openstack.pace`): a real Neutron takes
0.1-0.3 s a port, so a bulk of 100 needs tens of seconds, and a timeout
shorter than that would only make the request's fate unknown. Each port
is bound to its pod's node (``binding:host_id``).

Failures, given that a bulk create is all or nothing: a chunk Neutron
refuses (a 4xx, the port quota included) created nothing, so its ports are
then created one by one: one bad request or the last of the quota holds
back only its own pods. A chunk answered 5xx or garbage is over (Neutron
answered) but may or may not exist: its pods get the error, and the caller
looks their ports up before creating again. A chunk with no answer at all
(a timeout, a dropped connection) may still commit for as long as Neutron
works on it: its pods are handed back as *pending* with the time until
which it may commit, and the caller creates nothing for them before then
(no port doubled, none leaked). Once Neutron is out, the rest is not
tried; a full quota or a full subnet stops the rest too.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.openstack.making import (
    MacsRefused,
    PortMaker,
    Want,
)
from kuryr_supervisor.controller.openstack.pace import Pace

#: Longest wait of a pod for others to share its request (seconds).
WINDOW = 0.05
#: Most ports in one bulk request.
MAX_PORTS = 100
#: Refusals after which no more ports are asked for: a full quota or
#: subnet, what no retry fixes (the network or subnet gone, a policy that
#: forbids), a policy that refuses the MACs asked for (asked again without).
STOPS = (osa.QuotaExceeded, wire.SubnetFull, *wire.UNFIXABLE, MacsRefused)
#: How often the waiting loop beats (seconds).
_BEAT_EVERY = 0.2
#: A request is given up this long after its timeout (its thread's own
#: socket timeout fires first).
_GRACE = 1.0


class Batch:
    """Pod UIDs waiting for a port, in arrival order."""

    def __init__(self, *, window: float = WINDOW, size: int = MAX_PORTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window, self.size = window, size
        #: What the window is measured on (monotonic seconds).
        self.clock = clock
        self._uids: dict[str, None] = {}
        self._since = 0.0

    def __len__(self) -> int:
        return len(self._uids)

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids

    def add(self, uid: str) -> None:
        if not self._uids:
            self._since = self.clock()
        self._uids[uid] = None

    def discard(self, uid: str) -> None:
        self._uids.pop(uid, None)

    def wake_in(self) -> float:
        """Seconds until the batch is due (inf when empty, 0 when due)."""
        if not self._uids:
            return float("inf")
        if len(self._uids) >= self.size:
            return 0.0
        return max(0.0, self._since + self.window - self.clock())

    def due(self) -> bool:
        return bool(self._uids) and self.wake_in() <= 0.0

    def take(self) -> list[str]:
        uids, self._uids = list(self._uids), {}
        return uids


@dataclasses.dataclass
class Outcome:
    """What a :func:`create` made: UID -> port; UID -> why not; and, for
    the pods of a request whose answer was lost, UID -> until when (the
    pace's clock) that request may still commit (see
    :mod:`~kuryr_supervisor.controller.openstack.pace`)."""

    made: dict[str, osa.Port] = dataclasses.field(default_factory=dict)
    failed: dict[str, Exception] = dataclasses.field(default_factory=dict)
    pending: dict[str, float] = dataclasses.field(default_factory=dict)


def unannounced(uids: list[str], within: float) -> None:
    """No creates Lease: a controller without leader election."""


def create(maker: PortMaker, devices: Sequence[tuple[str, str]], *,
           tag: str, pace: Pace, in_flight: int,
           hosts: Mapping[str, str] | None = None,
           beat: Callable[[], None] = lambda: None,
           on_made: Callable[[dict[str, osa.Port]], None] | None = None,
           announce: Callable[[list[str], float], None] = unannounced,
           groups: Mapping[str, tuple[str, ...]] | None = None
           ) -> Outcome:
    """Ports for ``devices`` ((port name, pod UID) pairs), in requests
    sized and timed by ``pace`` (the handler's: ``[controller]``'s
    options), ``in_flight`` at once, each made by ``maker`` (bound to the
    pod's node, ``hosts``: UID -> node; tagged; its MAC derived from the
    pod's UID where Neutron allows); ``on_made`` is called, in the
    caller's thread, with the ports of each request as it is answered
    (their pods need not wait for the slowest request). ``announce(uids,
    seconds)`` is called before each request is sent with its pods and
    how long it may plausibly still commit (``Pace.likely_for``, the
    create announcer); if it raises, that request and the rest are not
    sent and their pods fail with its error. ``groups``: UID -> the
    security groups of its port (absent: the project's default group),
    per port in the bulk body. See the module for the other failure
    rules."""
    out = Outcome()
    tags = [tag] if tag else []
    hosts, groups = hosts or {}, groups or {}
    todo = list(devices)
    stop: Exception | None = None        # Neutron is out: send no more
    running: dict[concurrent.futures.Future[list[osa.Port]],
                  tuple[list[tuple[str, str]], float, float]] = {}
    pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, in_flight), thread_name_prefix="port-create")

    def wants(chunk: Sequence[tuple[str, str]]) -> list[Want]:
        return [Want(name, uid, host=hosts.get(uid, ""), derive=True,
                     groups=groups.get(uid)) for name, uid in chunk]
    try:
        while todo or running:
            while todo and stop is None and \
                    len(running) < pace.in_flight(in_flight):
                size = pace.batch_size()
                timeout = pace.timeout_for(len(todo[:size]))
                try:
                    announce([uid for _, uid in todo[:size]],
                             pace.likely_for(len(todo[:size])))
                except Exception as exc:  # noqa: BLE001 - not sent: theirs
                    stop = exc
                    break
                chunk, todo = todo[:size], todo[size:]
                future = pool.submit(maker.make, wants(chunk), tags=tags,
                                     timeout=timeout, bulk=True)
                running[future] = (chunk, pace.now(), timeout)
            if stop is not None and todo:
                out.failed.update((uid, stop) for _, uid in todo)
                todo = []
            if not running:
                break
            beat()
            done, _ = concurrent.futures.wait(
                running, timeout=_BEAT_EVERY,
                return_when=concurrent.futures.FIRST_COMPLETED)
            for future in list(running):
                chunk, sent, timeout = running[future]
                late = pace.now() > sent + timeout + _GRACE
                if future not in done and not late:
                    continue
                del running[future]
                before = len(out.made)
                error = _settle(maker, future, chunk, sent, timeout, pace,
                                out, tags=tags, wants=wants,
                                announce=announce)
                if error is not None and stop is None:
                    stop = error
                if on_made is not None and len(out.made) > before:
                    on_made({uid: out.made[uid] for _, uid in chunk
                             if uid in out.made})
    finally:
        pool.shutdown(wait=False)
    # The ports in request order (answers come as they come).
    return dataclasses.replace(out, made={
        uid: out.made[uid] for _, uid in devices if uid in out.made})


def _settle(maker: PortMaker,
            future: concurrent.futures.Future[list[osa.Port]],
            chunk: list[tuple[str, str]], sent: float, timeout: float,
            pace: Pace, out: Outcome, **how: Any) -> Exception | None:
    """Record one request's outcome; the error that stops further
    requests, if any."""
    if not future.done():
        exc: Exception = osa.OpenStackUnavailable(
            f"Neutron POST /v2.0/ports (bulk of {len(chunk)}): no answer "
            f"within {timeout:g}s")
    else:
        try:
            ports = future.result()
        except Exception as caught:  # noqa: BLE001 - sorted out below
            exc = wire.refined(caught)
        else:
            pace.answered(len(chunk), pace.now() - sent)
            out.made.update(zip((uid for _, uid in chunk), ports, strict=True))
            return None
    if isinstance(exc, osa.OpenStackRefused) and not isinstance(
            exc, (*wire.UNFIXABLE, MacsRefused, osa.MacInUse)):
        return _one_by_one(maker, chunk, exc, out.made, out.failed, **how)
    out.failed.update((uid, exc) for _, uid in chunk)
    if getattr(exc, "status", 0) == 0:
        # no answer at all: Neutron may still be working on it
        until = pace.may_commit_until(sent, timeout)
        out.pending.update((uid, until) for _, uid in chunk)
    return exc if not isinstance(exc, osa.MacInUse) else None


def _one_by_one(maker: PortMaker, chunk: Sequence[tuple[str, str]],
                refused: osa.OpenStackRefused, made: dict[str, osa.Port],
                failed: dict[str, Exception], *, tags: list[str],
                wants: Callable[[Sequence[tuple[str, str]]], list[Want]],
                announce: Callable[[list[str], float], None]
                ) -> Exception | None:
    """After a refused bulk (nothing created): each port on its own.
    Returns the error that should stop further creates, if any."""
    if len(chunk) == 1:
        failed[chunk[0][1]] = refused
        return refused if isinstance(refused, STOPS) else None
    timeout = maker.cloud.timeout
    for i, (want, (_, uid)) in enumerate(zip(wants(chunk), chunk,
                                             strict=True)):
        try:
            announce([uid], timeout)
        except Exception as unsent:  # noqa: BLE001 - not sent: theirs
            failed.update((u, unsent) for _, u in chunk[i:])
            return unsent
        try:
            [made[uid]] = maker.make([want], tags=tags, timeout=timeout)
        except osa.OpenStackRefused as caught:
            exc = wire.refined(caught)
            failed[uid] = exc
            if isinstance(exc, STOPS):
                failed.update((u, exc) for _, u in chunk[i + 1:])
                return exc
        except Exception as exc:  # noqa: BLE001 - lost answer: handed back
            failed.update((u, exc) for _, u in chunk[i:])
            return exc
    return None
