"""Port pools: Neutron ports made ahead of time, handed to pods at once.

A real Neutron makes about seven ports a second whatever the batching, so a
burst of pods waits for its last port in proportion to its size; a pool
(Kuryr's idea) moves that wait ahead of the pods. Pools are keyed as
Kuryr keys them (:class:`PoolKey`: network, subnet, project, security
groups, node); this controller makes its pods' ports on one network,
subnet and project with Neutron's default security group, and binds a
port to its node when a pod claims it, so it keeps one pool.

What the neutron_port handler calls (a few lines of its own):

- :meth:`PortPools.adopt` on every resync: the free pool ports in the
  list of the controller's ports are taken out of it (the sweep never sees
  them) and re-adopted, so a restart keeps them instead of making new
  ones; a pool port a pod holds stays in the list as that pod's;
- :meth:`PortPools.serve` before a create: each pod gets a free port at
  once, its PodPort is written like any other's, and the port's update
  (``device_id``, name, binding) follows in the background
  (:mod:`.poolclaim`); the pods left (a miss: the pool was empty) are
  created as before;
- :meth:`PortPools.start` in ``run``: the refill thread (:mod:`.poolrefill`).

Invariants: a free port is handed to one pod at most (taken out of the
pool under the lock); a port that a claim holds or a written PodPort names
is never free again; the figures go to ``/status`` and ``/metrics``
(:mod:`kuryr_supervisor.state.poolstats`).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from oslo_config import cfg

from kuryr_supervisor.controller import openstack as osa
from kuryr_supervisor.controller import poolneutron
from kuryr_supervisor.controller.poolclaim import Claims
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
    creating: int = 0
    hits: int = 0
    misses: int = 0
    given_back: int = 0


@dataclasses.dataclass
class Served:
    taken: list[tuple[str, osa.Port]] = dataclasses.field(default_factory=list)
    rest: list[str] = dataclasses.field(default_factory=list)


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
        self.claims = Claims(int(self.opts.ports_pool_claim_requests))

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
        self.cloud = self.claims.cloud = cloud
        self.claims.stopping = stopping
        thread = threading.Thread(target=Refill(self, cloud, owned).run,
                                  args=(stopping,), name="pool-refill",
                                  daemon=True)
        thread.start()
        return thread

    # -- the resync's list ---------------------------------------------------------
    def adopt(self, listed: Iterable[osa.Port], pods: Pods | None = None,
              named: Mapping[str, tuple[str, str, str]] | None = None
              ) -> list[osa.Port]:
        """``listed`` without its free pool ports, which are re-adopted.
        A pool port a pod holds (claimed here, or named by its written
        PodPort: ``named``, uid -> (port id, address, MAC)) stays in the
        list as that pod's, and an update not yet applied is restarted."""
        pods = pods or {}
        holder = {n[0]: uid for uid, n in (named or {}).items()}
        rest: list[osa.Port] = []
        waiting: list[osa.Port] = []
        for port in listed:
            if port.device_id != poolneutron.POOL_DEVICE:
                rest.append(port)
                continue
            uid = self.claims.owner(port.id) or holder.get(port.id, "")
            if not uid:
                waiting.append(port)
                continue
            rest.append(dataclasses.replace(port, device_id=uid))
            if uid in pods:
                self.claims.submit(port.id, uid, _name(pods, uid), "")
        with self.lock:
            pool = self.pool
            new = [p for p in waiting if p.id not in pool.free]
            pool.free.update((p.id, p) for p in new)
        if new and not self.adopted.is_set():
            LOG.info("port pool %s: %d ports found in Neutron, kept",
                     self.key.label, len(new))
        self.adopted.set()
        self.wake.set()
        return rest

    # -- pods ------------------------------------------------------------------------
    def serve(self, create: list[str], pods: Pods,
              hosts: Mapping[str, str] | None = None) -> Served:
        """Pool ports for the pods ``create``, at once (see the module);
        their updates follow in the background (:mod:`.poolclaim`)."""
        out = Served()
        if not self.enabled or not create or self.cloud is None:
            out.rest = list(create)
            return out
        with self.lock:
            pool = self.pool
            for uid in create:
                if uid in pods and pool.free:
                    port = pool.free.pop(next(iter(pool.free)))
                    out.taken.append((uid, port))
                    pool.hits += 1
                else:
                    out.rest.append(uid)
                    pool.misses += uid in pods
        hosts = hosts or {}
        for uid, port in out.taken:
            self.claims.submit(port.id, uid, _name(pods, uid),
                               hosts.get(uid, ""))
        self.wake.set()
        self.publish()
        return out

    # -- figures -----------------------------------------------------------------------
    def publish(self) -> None:
        if self.board is None:
            return
        with self.lock:
            # A disabled pool that never held a port is not shown.
            rows = [(key.label, dataclasses.replace(pool, free={}),
                     len(pool.free)) for key, pool in self.pools.items()
                    if self.enabled or pool.free or pool.given_back]
        for row, (label, pool, free) in enumerate(rows):
            self.board.publish(
                row, label, free=free, creating=pool.creating,
                hits=pool.hits, misses=pool.misses,
                given_back=pool.given_back,
                low=int(self.opts.ports_pool_min) if self.enabled else 0,
                high=int(self.opts.ports_pool_max) if self.enabled else 0)


def _name(pods: Pods, uid: str) -> str:
    """The port's name once a pod holds it, as a created port's."""
    ns, name = pods[uid][:2] if uid in pods else ("", uid)
    return f"kuryr-{ns}-{name}"[:255]
