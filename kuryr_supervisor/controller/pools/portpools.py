"""Port pools: Neutron ports made ahead of time, handed to pods at once.

A real Neutron makes about seven ports a second whatever the batching, so a
burst of pods waits for its last port in proportion to its size; a pool
(Kuryr's idea) moves that wait ahead of the pods. Pools are keyed as
Kuryr keys them (:class:`PoolKey`: network, subnet, project, security
groups, node); this controller makes its pods' ports on one network,
subnet and project with Neutron's default security group, so the node
tells its pools apart: a pool port is made bound to its node
(``binding:host_id``), and a pod takes one from its own node's pool, with
no rebinding. Which nodes get a pool: :mod:`.nodes`. When Neutron
refuses ``binding:host_id`` to the controller (403: a member role) the
pools fall back to one unbound pool (the base key, node ""), warned once;
a claimed port then gets its binding in its update, if at all. In bound
mode the unbound pool holds only ports left unbound by an older release:
handed out when a pod's node pool is empty, never refilled.

What the neutron_port handler calls (a few lines of its own):

- :meth:`PortPools.adopt` on every resync: the free pool ports of the
  list are taken out of it (the sweep never sees them) and re-adopted into
  their nodes' pools (``binding:host_id``): a restart keeps them; a pool
  port a pod holds stays in the list as that pod's;
- :meth:`PortPools.serve` before a create: each pod gets a free port of
  its node's pool at once, its PodPort written like any other's, the
  port's update following in the background (:mod:`.claims`); the pods
  left (a miss) are created as before, and the pool is refilled;
- :meth:`PortPools.placed` / :meth:`PortPools.listed`: where pods run;
- :func:`.refill.start` in ``run``: the refill thread, which changes the
  pools through the named methods below (:meth:`PortPools.shortfalls`,
  :meth:`PortPools.making`, :meth:`PortPools.made`, :meth:`PortPools.extra`).

Invariants: a free port is handed to one pod at most (taken out of the
pool under the lock); a port that a claim holds or a written PodPort names
is never free again; the figures go to ``/status`` and ``/metrics``
(:mod:`kuryr_supervisor.state.poolstats`), one row per pool.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping

from oslo_config import cfg

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.pools import poolports
from kuryr_supervisor.controller.pools.claims import Claims
from kuryr_supervisor.controller.pools.nodes import PoolNodes
from kuryr_supervisor.controller.pools.records import (  # noqa: F401 - re-exported
    Pods,
    Pool,
    PoolKey,
    Served,
    port_name,
)
from kuryr_supervisor.state.poolstats import PoolBoard

LOG = logging.getLogger(__name__)


class PortPools:
    """The handler's pools (see the module); ``board`` shows them."""

    def __init__(self, conf: cfg.ConfigOpts, board: PoolBoard | None = None,
                 *, key: PoolKey | None = None) -> None:
        self.opts = conf.vif_pool
        ctl = conf.controller
        #: The base key (node ""): the unbound pool's.
        self.key = key or PoolKey(ctl.pod_network_id, ctl.pod_subnet_id,
                                  str(ctl.project_id))
        self.board = board
        self.lock = threading.Lock()
        self.pools: dict[PoolKey, Pool] = {}
        self.nodes = PoolNodes()
        #: Pool ports are bound to their node (until Neutron refuses it).
        self.bind = True
        #: Set when a pool may need work (a port taken, a list adopted).
        self.wake = threading.Event()
        #: The first resync's list was adopted: refilling may start.
        self.adopted = threading.Event()
        self.cloud: osa.OpenStack | None = None
        self.claims = Claims(int(self.opts.ports_pool_claim_requests))

    @property
    def enabled(self) -> bool:
        return bool(self.opts.enabled) and int(self.opts.ports_pool_max) > 0

    def key_for(self, node: str) -> PoolKey:
        """The pool of ``node``'s pods (the base key when unbound)."""
        if self.bind and node:
            return dataclasses.replace(self.key, node=node)
        return self.key

    def of(self, node: str = "") -> Pool:
        """``node``'s pool as it is (an empty one if it has none)."""
        with self.lock:
            return self.pools.get(self.key_for(node)) or Pool()

    def wanted(self) -> list[PoolKey]:
        """The pools the refill keeps between the marks: one per node that
        runs pods (:mod:`.nodes`), or the unbound one."""
        if not self.bind:
            return [self.key]
        idle = float(self.opts.ports_pool_node_idle)
        return [self.key_for(n) for n in self.nodes.wanted(idle)]

    def placed(self, uid: str, node: str) -> None:
        """Pod ``uid`` needs a port on ``node`` ("": no longer); a node
        new here gets its pool filled at once. Nothing is kept while the
        pools are off (the option is read at start)."""
        if not node:
            self.nodes.leave(uid)
        elif self.enabled and self.nodes.place(uid, node):
            self.wake.set()

    def listed(self, placed: list[tuple[str, str]]) -> None:
        """Every pod that needs a port, and its node (a list)."""
        self.nodes.replace(placed if self.enabled else [])

    def unbind(self, why: object) -> None:
        """Neutron refuses ``binding:host_id``: one unbound pool from now
        on, holding every free port (warned once)."""
        with self.lock:
            if not self.bind:
                return
            self.bind = False
            # A batch in flight lands in the base pool when answered.
            base = self.pools.setdefault(self.key, Pool())
            for key in [k for k in self.pools if k != self.key]:
                pool = self.pools.pop(key)
                base.free.update(pool.free)
                base.hits += pool.hits
                base.misses += pool.misses
                base.given_back += pool.given_back
        LOG.warning("Neutron refuses binding:host_id to the controller "
                    "(%s): one unbound port pool for every node, each "
                    "port bound when a pod takes it, if at all", why)

    def attach(self, cloud: osa.OpenStack, stopping: threading.Event) -> None:
        """The adapter that claims use, until ``stopping`` (the refill
        thread is :func:`.refill.start`'s)."""
        self.cloud = self.claims.cloud = cloud
        self.claims.stopping = stopping

    # -- the resync's list ---------------------------------------------------------
    def adopt(self, listed: Iterable[osa.Port], pods: Pods | None = None,
              named: Mapping[str, tuple[str, str, str]] | None = None
              ) -> list[osa.Port]:
        """``listed`` without its free pool ports, which are re-adopted
        into their nodes' pools. A pool port a pod holds (claimed here, or
        named by its written PodPort: ``named``, uid -> (port id, address,
        MAC)) stays in the list as that pod's, and an update not yet
        applied is restarted."""
        pods = pods or {}
        holder = {n[0]: uid for uid, n in (named or {}).items()}
        rest: list[osa.Port] = []
        waiting: list[osa.Port] = []
        for port in listed:
            if port.device_id != poolports.POOL_DEVICE:
                rest.append(port)
                continue
            uid = self.claims.owner(port.id) or holder.get(port.id, "")
            if not uid:
                waiting.append(port)
                continue
            rest.append(dataclasses.replace(port, device_id=uid))
            if uid in pods:
                self.claims.submit(port.id, uid, port_name(pods, uid), "")
        new = self.keep(waiting)
        if new and not self.adopted.is_set():
            LOG.info("port pools: %d ports found in Neutron, kept", new)
        self.adopted.set()
        self.wake.set()
        return rest

    def keep(self, ports: Iterable[osa.Port]) -> int:
        """Free pool ports into their nodes' pools (known ones are left
        where they are); how many were new. The ports of a pool with a
        batch being made are left to that batch's answer (:meth:`made`):
        Neutron lists a bulk create's ports before it answers, and a port
        kept from the list, then handed to a pod, was put back as free by
        the answer, for a second pod to take."""
        new = 0
        with self.lock:
            known = {pid for pool in self.pools.values() for pid in pool.free}
            for port in ports:
                if port.id in known or self.claims.owner(port.id):
                    continue
                key = self.key_for(port.host)
                if key in self.pools and self.pools[key].creating:
                    continue        # the batch's answer brings it
                self.pools.setdefault(key, Pool()).free[port.id] = port
                new += 1
                if key.node:
                    self.nodes.heard_of(key.node)
        return new

    # -- pods ------------------------------------------------------------------------
    def serve(self, create: list[str], pods: Pods,
              hosts: Mapping[str, str] | None = None) -> Served:
        """Pool ports for the pods ``create`` (``hosts``: UID -> node), at
        once (see the module); their updates follow in the background
        (:mod:`.claims`). A pod's node gets a pool on first demand."""
        out = Served()
        if not self.enabled or not create or self.cloud is None:
            out.rest = list(create)
            return out
        hosts = hosts or {}
        rebind: dict[str, str] = {}
        with self.lock:
            spare = self.pools.get(self.key) if self.bind else None
            for uid in create:
                if uid not in pods:
                    out.rest.append(uid)
                    continue
                node = hosts.get(uid, "")
                pool = self.pools.setdefault(self.key_for(node), Pool())
                source = pool if pool.free or spare is None else spare
                if not source.free:
                    out.rest.append(uid)
                    pool.misses += 1
                    continue
                port = source.free.pop(next(iter(source.free)))
                out.taken.append((uid, port))
                pool.hits += 1
                if port.host != node:       # not bound to it yet
                    rebind[uid] = node
        for uid, port in out.taken:
            self.claims.submit(port.id, uid, port_name(pods, uid),
                               rebind.get(uid, ""))
        self.wake.set()
        self.publish()
        return out

    # -- the refill's ------------------------------------------------------------
    def any_free(self) -> osa.Port | None:
        """One free port of any pool (None: none)."""
        with self.lock:
            return next((p for pool in self.pools.values()
                         for p in pool.free.values()), None)

    def extra(self) -> list[tuple[PoolKey, list[str]]]:
        """Take out the free ports above each pool's high-water mark (all
        of them when the pools are off or the pool's node is idle), to be
        given back; an idle node's pool goes, and so does the unbound one
        of a bound mode (never refilled) once empty."""
        high = int(self.opts.ports_pool_max) if self.enabled else 0
        wanted = set(self.wanted())
        extra: list[tuple[PoolKey, list[str]]] = []
        with self.lock:
            for key, pool in list(self.pools.items()):
                idle = key not in wanted and key != self.key
                ids = list(pool.free)[0 if idle else high:]
                for port_id in ids:
                    del pool.free[port_id]
                if ids:
                    extra.append((key, ids))
                if not pool.free and not pool.creating and self.enabled \
                        and (idle or (key == self.key and self.bind)):
                    del self.pools[key]
        return extra

    def gave_back(self, key: PoolKey, count: int) -> None:
        """``count`` ports of ``key``'s pool were deleted."""
        with self.lock:
            pool = self.pools.get(key)
            if pool is not None:
                pool.given_back += count

    def shortfalls(self) -> list[tuple[PoolKey, int]]:
        """(pool, ports its next batch makes) of every wanted pool below
        its low-water mark, the emptiest first; the quota is not read
        here."""
        opts = self.opts
        low, high = int(opts.ports_pool_min), int(opts.ports_pool_max)
        out = []
        wanted = self.wanted()
        with self.lock:
            for key in wanted:
                pool = self.pools.setdefault(key, Pool())
                have = len(pool.free) + pool.creating
                count = min(int(opts.ports_pool_batch), high - have)
                if have < low and count > 0:
                    out.append((have, key, count))
        return [(key, count) for _, key, count in sorted(
            out, key=lambda t: (t[0], t[1].node))]

    def making(self, key: PoolKey, count: int) -> None:
        """A batch of ``count`` ports for ``key``'s pool is being made."""
        with self.lock:
            self.pools.setdefault(key, Pool()).creating += count
        self.publish()

    def made(self, key: PoolKey, count: int,
             ports: Iterable[osa.Port] = ()) -> None:
        """That batch is over: ``ports`` were made (none: it failed). They
        land in the pool of ``key``'s node as the pools are now (a batch
        answered after the pools turned unbound lands in the unbound one)."""
        with self.lock:
            pool = self.pools.get(key)      # gone if the pools turned unbound
            if pool is not None:
                pool.creating -= count
            target = self.pools.setdefault(self.key_for(key.node), Pool())
            target.free.update((p.id, p) for p in ports)
        self.publish()

    # -- figures -----------------------------------------------------------------------
    def publish(self) -> None:
        if self.board is None:
            return
        with self.lock:
            # A disabled pool that never held a port is not shown.
            rows = [(key, dataclasses.replace(pool, free={}),
                     len(pool.free)) for key, pool in sorted(
                         self.pools.items(), key=lambda kv: kv[0].node)
                    if self.enabled or pool.free or pool.given_back]
        low = int(self.opts.ports_pool_min) if self.enabled else 0
        high = int(self.opts.ports_pool_max) if self.enabled else 0
        self.board.publish_all([(key.label, {
            "free": free, "creating": pool.creating, "hits": pool.hits,
            "misses": pool.misses, "given_back": pool.given_back,
            "low": low, "high": high}) for key, pool, free in rows])
