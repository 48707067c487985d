"""Which pods' port creates the leader has at Neutron, and until when they
may commit, kept in a second Lease, so that a new leader never doubles a
port the old one is still making.

A port create outlives its sender: Neutron commits a bulk create for as
long as it works on it, whatever became of the client (see
:mod:`~kuryr_supervisor.controller.openstack.pace`: until ``COMMIT_WAIT``
times as long as Neutron plausibly takes for it, ``Pace.likely_for``,
after it was sent). A leader that loses the controller Lease in the
middle of a burst (killed, or paused past its lease) leaves such creates
behind; the new leader lists Neutron, finds no port for
those pods, and would make a second one each (seen against a real
Neutron: 5 pods of a burst of 60 with two ports until a resync swept one).

So the leader announces each create before sending it, in the Lease
``<lease_name>-creates`` (:data:`SUFFIX`) beside the election's: the
annotation :data:`ANNOTATION` maps each pod whose create may still commit
to the time until which it may (JSON, epoch seconds), and ``renewTime`` +
``leaseDurationSeconds`` is the latest of them. A create is never sent
unless that write succeeded. A handler process that starts leading (a new
leader, or a restarted process of the same replica, which knows nothing
of its predecessor's requests) reads the Lease first and holds only the
pods named there, and only until their time: a port such a create commits
meanwhile is found by the next list and adopted (one Neutron commits
later still, far slower than measured, gives its pod a second port until
the next resync deletes the one its PodPort does not name). Every other
pod gets its port at once. Pool refills are not announced: a pool port made twice is
one more free port.

The announcement names at most :data:`MOST` pods; beyond that it says
only until when (``"*"``), and a new leader holds every pod without a
port until then. An annotation that cannot be read is taken the same way.

Times are the writer's wall clock against the reader's, as in the
election (:mod:`kuryr_supervisor.kubernetes.lease`): keep the clocks in
step.

Without leader election there is no Lease, but the handler process the
master restarts in place of a killed one has the same problem; the
announcement is then kept in the master's shared memory
(:class:`LocalCreates`, :mod:`kuryr_supervisor.state.creates`), on the
host's monotonic clock.

The handler process builds the one it uses (the creates Lease once it
leads, :mod:`.election`; else the shared memory's) and hands it to its
handler in the :class:`~kuryr_supervisor.controller.handlers.HandlerContext`.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kuryr_supervisor.kubernetes import leases
from kuryr_supervisor.kubernetes import wire as k8s
from kuryr_supervisor.state.creates import CreatesBoard

if TYPE_CHECKING:
    from kuryr_supervisor.kubernetes.client import K8sClient

LOG = logging.getLogger(__name__)

#: The creates Lease is named after the election's with this suffix.
SUFFIX = "-creates"
#: The annotation naming the pods whose creates may still commit.
ANNOTATION = "kuryr-supervisor.openstack.org/creates-in-flight"
#: Most pods named in it (about 60 bytes each; annotations hold 256 KiB).
MOST = 3000
#: The key that stands for every pod (too many to name, or unreadable).
EVERY = "*"


@dataclasses.dataclass(frozen=True)
class Inherited:
    """What a process that starts leading must wait for: pod UID ->
    seconds left, and seconds left for every other pod (0: none)."""

    pods: dict[str, float]
    rest: float = 0.0

    def left(self, uid: str) -> float:
        return max(self.pods.get(uid, 0.0), self.rest)


class Announcer:
    """What both keepers of the announcement share: what a process that
    starts leading inherits, and what a leader announces. A keeper says
    where it keeps it (``_load``, ``_store``), in its own clock."""

    where = ""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._written: dict[str, float] = {}     # uid -> until (clock)
        self._read = False

    def _load(self) -> tuple[float, dict[str, float] | None]:
        """(the latest time announced, UID -> until; None: unreadable)."""
        raise NotImplementedError

    def _store(self, pods: dict[str, float], last: float,
               now: float) -> None:
        raise NotImplementedError

    def inherited(self) -> Inherited:
        """The creates announced before this process led that may still
        commit. Raises what the keeper's reads raise."""
        until, named = self._load()
        self._read = True
        self._written = {}
        now = self._clock()
        if named is None:
            LOG.warning("%s names no readable creates: every pod without a "
                        "port waits until %.1f s from now", self.where,
                        max(0.0, until - now))
            return Inherited({}, max(0.0, until - now))
        rest = max(0.0, named.pop(EVERY, 0.0) - now)
        self._written = {u: t for u, t in named.items() if t > now}
        return Inherited({u: t - now for u, t in self._written.items()},
                         rest)

    def cover(self, pods: Mapping[str, float]) -> None:
        """Announce that the creates of ``pods`` (UID -> seconds from now)
        may commit until then; returns once that is kept, at once if it
        already was. Raises
        :class:`~kuryr_supervisor.kubernetes.client.K8sTemporary` when it
        cannot be kept: then nothing may be sent."""
        now = self._clock()
        wanted = {u: float(math.ceil(now + s)) for u, s in pods.items()
                  if s > 0}
        every = self._written.get(EVERY, 0.0)
        if all(max(self._written.get(u, 0.0), every) >= t
               for u, t in wanted.items()):
            return
        if len(wanted) > MOST:
            wanted = {EVERY: max(wanted.values())}
        last = max(wanted.values(), default=float(math.ceil(now)))
        try:
            if not self._read:
                self.inherited()
            self._store(wanted, last, now)
        except k8s.K8sError as exc:
            self._read = False        # a 409 or a 404: read it again
            raise k8s.K8sTemporary(
                f"port creates wait: {self.where} that announces them "
                f"cannot be written ({exc})", exc.status) from exc
        self._written = dict(wanted)


class CreateLease(Announcer):
    """The creates Lease of one leading replica (see the module)."""

    def __init__(self, client: K8sClient, *, namespace: str, name: str,
                 identity: str, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.client = client
        self.namespace, self.name, self.identity = namespace, name, identity
        self.where = f"the Lease {namespace}/{name}"
        self._version: str | None = None

    def _load(self) -> tuple[float, dict[str, float] | None]:
        lease = leases.read_lease(self.client.leases, self.namespace, self.name)
        if lease is None:
            self._version = None
            return 0.0, {}
        self._version = lease.resource_version
        return (lease.renew_time + lease.duration,
                _parse(lease.annotations.get(ANNOTATION, "")))

    def _store(self, pods: dict[str, float], last: float,
               now: float) -> None:
        record = leases.write_lease(
            self.client.leases, self.namespace, self.name, holder=self.identity,
            duration=max(1, math.ceil(last - now)), transitions=0,
            acquired=False, resource_version=self._version, renewed=now,
            annotations={ANNOTATION: _text(pods)})
        self._version = record.resource_version


class LocalCreates(Announcer):
    """Without leader election: the announcement in the master's shared
    memory (:mod:`kuryr_supervisor.state.creates`), for the handler
    process restarted in this one's place; times on the shared monotonic
    clock."""

    where = "the shared memory"

    def __init__(self, board: CreatesBoard,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self.board = board

    def _load(self) -> tuple[float, dict[str, float] | None]:
        until, text = self.board.read()
        return until, None if text is None else _parse(text.decode())

    def _store(self, pods: dict[str, float], last: float,
               now: float) -> None:
        self.board.write(last, _text(pods).encode())


def _text(pods: Mapping[str, float]) -> str:
    return json.dumps({u: int(t) for u, t in pods.items()},
                      separators=(",", ":"), sort_keys=True)


def _parse(text: str) -> dict[str, float] | None:
    """The announcement's UID -> until; None when it is not ours."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float))
            and not isinstance(v, bool) for k, v in data.items()):
        return None
    return {k: float(v) for k, v in data.items()}
