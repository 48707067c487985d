"""Port pools: Neutron ports made ahead of time, handed to pods at once.

A real Neutron makes about seven ports a second whatever the batching, so a
burst of pods waits for its last port in proportion to its size; a pool
(Kuryr's idea) moves that wait ahead of the pods. Pools are keyed as
Kuryr keys them (:class:`PoolKey`: network, subnet, project, security
groups, node); this controller makes its pods' ports on one network,
subnet and project with Neutron's default security group, and binds a
port to its node when a pod claims it, so it keeps one pool.

What the neutron_port handler calls (a few lines of its own):

- :meth:`PortPools.adopt` on every resync: the pool ports in the list of
  the controller's ports are taken out of it (the sweep never sees them)
  and re-adopted, so a restart keeps them instead of making new ones;
- :meth:`PortPools.serve` before a create: each pod gets a free port with
  one update (:func:`.poolneutron.claim`, a few at once); the pods left
  (a miss: the pool was empty) are created as before;
- :meth:`PortPools.start` in ``run``: the refill thread (:mod:`.poolrefill`).

Invariants: a free port is handed to one pod at most (taken out of the
pool under the lock before its claim is sent); a port whose claim failed
is never handed out again by this process until a later resync lists it
still waiting in the pool; the figures go to ``/status`` and ``/metrics``
(:mod:`kuryr_supervisor.state.poolstats`).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oslo_config import cfg

from kuryr_supervisor.controller import openstack as osa
from kuryr_supervisor.controller import poolneutron
from kuryr_supervisor.state.poolstats import PoolBoard

LOG = logging.getLogger(__name__)

#: uid -> (namespace, name, port id or "") as the handler keeps its pods
Pods = Mapping[str, tuple[str, str, str]]


@dataclasses.dataclass(frozen=True)
class PoolKey:
    network_id: str
    subnet_id: str = ""
    project_id: str = ""
    security_groups: tuple[str, ...] = ()
    node: str = ""

    @property
    def label(self) -> str:
        parts = [self.network_id, self.subnet_id or "-",
                 self.project_id or "-"]
        if self.security_groups:
            parts.append(",".join(self.security_groups))
        return "/".join(parts) + (f"@{self.node}" if self.node else "")


@dataclasses.dataclass
class Pool:
    free: dict[str, osa.Port] = dataclasses.field(default_factory=dict)
    claiming: set[str] = dataclasses.field(default_factory=set)
    #: port id -> until when a claim whose answer was lost may commit
    doubtful: dict[str, float] = dataclasses.field(default_factory=dict)
    creating: int = 0
    hits: int = 0
    misses: int = 0
    given_back: int = 0


@dataclasses.dataclass
class Served:
    taken: list[tuple[str, osa.Port]] = dataclasses.field(default_factory=list)
    rest: list[str] = dataclasses.field(default_factory=list)
    failed: dict[str, Exception] = dataclasses.field(default_factory=dict)
    #: pods whose claim's answer was lost: seconds it may still commit
    pending: dict[str, float] = dataclasses.field(default_factory=dict)


class PortPools:
    """The handler's pools (see the module); ``board`` shows them."""

    def __init__(self, conf: cfg.ConfigOpts, board: PoolBoard | None = None,
                 *, key: PoolKey | None = None) -> None:
        self.opts = conf.vif_pool
        ctl = conf.controller
        self.key = key or PoolKey(ctl.pod_network_id, ctl.pod_subnet_id,
                                  str(ctl.project_id))
        self.board = board
        self.lock = threading.Lock()
        self.pools: dict[PoolKey, Pool] = {self.key: Pool()}
        #: Set when a pool may need work (a port taken, a list adopted).
        self.wake = threading.Event()
        #: The first resync's list was adopted: refilling may start.
        self.adopted = threading.Event()
        self.cloud: osa.OpenStack | None = None
        self._claims: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.opts.enabled) and int(self.opts.ports_pool_max) > 0

    @property
    def pool(self) -> Pool:
        return self.pools[self.key]

    def start(self, cloud: osa.OpenStack, owned: Any,
              stopping: threading.Event) -> threading.Thread:
        """The refill thread (also gives back what a smaller or disabled
        pool holds), until ``stopping``."""
        from kuryr_supervisor.controller.poolrefill import Refill
        self.cloud = cloud
        thread = threading.Thread(target=Refill(self, cloud, owned).run,
                                  args=(stopping,), name="pool-refill",
                                  daemon=True)
        thread.start()
        return thread

    # -- the resync's list ---------------------------------------------------------
    def adopt(self, listed: Iterable[osa.Port]) -> list[osa.Port]:
        """``listed`` without its pool ports, which are re-adopted (those
        not already free or being claimed)."""
        rest: list[osa.Port] = []
        waiting: list[osa.Port] = []
        for port in listed:
            (waiting if port.device_id == poolneutron.POOL_DEVICE
             else rest).append(port)
        now = time.monotonic()
        with self.lock:
            pool = self.pool
            pool.doubtful = {i: t for i, t in pool.doubtful.items() if t > now}
            new = [p for p in waiting
                   if p.id not in pool.free and p.id not in pool.claiming
                   and p.id not in pool.doubtful]
            pool.free.update((p.id, p) for p in new)
        if new and not self.adopted.is_set():
            LOG.info("port pool %s: %d ports found in Neutron, kept",
                     self.key.label, len(new))
        self.adopted.set()
        self.wake.set()
        return rest

    # -- pods ------------------------------------------------------------------------
    def serve(self, create: list[str], pods: Pods,
              hosts: Mapping[str, str] | None = None,
              beat: Callable[[], None] = lambda: None) -> Served:
        """Pool ports for the pods ``create`` (see the module)."""
        out = Served()
        if not self.enabled or not create or self.cloud is None:
            out.rest = list(create)
            return out
        pairs: list[tuple[str, osa.Port]] = []
        with self.lock:
            pool = self.pool
            for uid in create:
                if uid in pods and pool.free:
                    port = pool.free.pop(next(iter(pool.free)))
                    pool.claiming.add(port.id)
                    pairs.append((uid, port))
                else:
                    out.rest.append(uid)
                    pool.misses += uid in pods
        self.wake.set()
        if pairs:
            self._claim(pairs, pods, hosts or {}, beat, out)
        self.publish()
        return out

    def _claim(self, pairs: list[tuple[str, osa.Port]], pods: Pods,
               hosts: Mapping[str, str], beat: Callable[[], None],
               out: Served) -> None:
        assert self.cloud is not None
        if self._claims is None:
            self._claims = concurrent.futures.ThreadPoolExecutor(
                max_workers=int(self.opts.ports_pool_claim_requests),
                thread_name_prefix="pool-claim")
        futures: dict[concurrent.futures.Future[osa.Port], tuple[str, str]] = {}
        for uid, port in pairs:
            name = f"kuryr-{pods[uid][0]}-{pods[uid][1]}"[:255]
            future = self._claims.submit(
                poolneutron.claim, self.cloud, port.id, device_id=uid,
                name=name, host=hosts.get(uid, ""))
            future.add_done_callback(self._claimed(port.id))
            futures[future] = (uid, port.id)
        end = time.monotonic() + self.cloud.deadline
        pending = set(futures)
        while pending and time.monotonic() < end:
            beat()
            _, pending = concurrent.futures.wait(pending, timeout=0.2)
        beat()
        for future, (uid, port_id) in futures.items():
            self._outcome(future, uid, out)
            if uid in out.pending:      # not handed out again meanwhile
                with self.lock:
                    self.pool.doubtful[port_id] = \
                        time.monotonic() + out.pending[uid]

    def _claimed(self, port_id: str
                 ) -> Callable[[concurrent.futures.Future[osa.Port]], None]:
        """A claim's answer came (or its request failed): the port is no
        longer out for a claim; a later resync says where it is."""
        def done(_: concurrent.futures.Future[osa.Port]) -> None:
            with self.lock:
                self.pool.claiming.discard(port_id)
        return done

    def _outcome(self, future: concurrent.futures.Future[osa.Port], uid: str,
                 out: Served) -> None:
        window = 2 * float(self.cloud.deadline if self.cloud else 0.0)
        if not future.done():
            out.failed[uid] = osa.OpenStackUnavailable(
                "Neutron PUT port (pool claim): no answer within "
                f"{window / 2:g}s")
            out.pending[uid] = window
            return
        exc = future.exception()
        if exc is None:
            out.taken.append((uid, future.result()))
            with self.lock:
                self.pool.hits += 1
        elif isinstance(exc, osa.OpenStackRefused) and exc.status == 404:
            out.rest.append(uid)        # the port is gone: make one instead
            with self.lock:
                self.pool.misses += 1
        else:
            out.failed[uid] = exc if isinstance(exc, Exception) \
                else RuntimeError(str(exc))
            if not isinstance(exc, osa.OpenStackRefused):
                out.pending[uid] = window       # it may have been applied

    # -- figures -----------------------------------------------------------------------
    def publish(self) -> None:
        if self.board is None:
            return
        with self.lock:
            # A disabled pool that never held a port is not shown.
            rows = [(key.label, dataclasses.replace(pool, free={},
                                                    claiming=set()),
                     len(pool.free)) for key, pool in self.pools.items()
                    if self.enabled or pool.free or pool.given_back]
        for row, (label, pool, free) in enumerate(rows):
            self.board.publish(
                row, label, free=free, creating=pool.creating,
                hits=pool.hits, misses=pool.misses,
                given_back=pool.given_back,
                low=int(self.opts.ports_pool_min) if self.enabled else 0,
                high=int(self.opts.ports_pool_max) if self.enabled else 0)
