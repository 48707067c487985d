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
refuses ``binding:host_id`` to the controller (403: a member role) new
pool ports are made unbound, in one unbound pool (the base key, node
""), warned once; the ports already bound to a node stay in that node's
pool, for its pods alone: a pod never gets a port bound to another node.
In bound mode the unbound pool holds only ports left unbound by an older
release: handed out when a pod's node pool is empty (bound to the pod's
node by its claim), never refilled.

Closed pools (beside the ``network_policy`` handler): a pod a
NetworkPolicy selects must never be handed a port that admits more than
its policies allow, so a pool port in the default group is claimed for it
with its groups in the claim's PUT before its PodPort (the caller's,
:attr:`~.records.Served.own`): a burst of such pods waits for a burst of
PUTs. A node that runs such pods therefore also keeps a *closed* pool:
ports made in no security group (port security on: they admit nothing,
:mod:`~kuryr_supervisor.controller.ports.guard`), named
:data:`~.poolports.CLOSED_NAME`. A selected pod takes one of those first:
its PodPort is written at once and its claim, its groups in the same PUT,
follows in the background (:mod:`.claims`); until it is applied the pod
admits nothing, never more. One closed pool per node whatever the
policies (its ports carry no policy's group: no pool per set of groups to
make, count or give back when the policies change, and nothing that holds
a policy's group from being deleted). A node gets one when a pod a
policy selects is served there, or is listed there (:meth:`PortPools.
listed`), and keeps it like its other pool (:mod:`.nodes`); the marks are
the same.

The project's port quota is shared: the pools leave room for a miss on
every node that runs pods (:mod:`.refill`), and a pod that still finds
the quota used up gets a free port of the fullest other pool, bound to
its node (:meth:`PortPools.take_fullest`, by the port handler).

What the neutron_port handler calls (a few lines of its own):

- :meth:`PortPools.adopt` on every resync: the free pool ports of the
  list are taken out of it (the sweep never sees them) and re-adopted into
  their nodes' pools (``binding:host_id``): a restart keeps them; a pool
  port a pod holds stays in the list as that pod's, and its claim, if not
  applied yet, is made again (binding included);
- :meth:`PortPools.serve` before a create: each pod gets a free port of
  its node's pool at once (a pod a NetworkPolicy selects, of its closed
  pool first), its PodPort written like any other's, the port's update
  following in the background (:mod:`.claims`); the pods left (a miss)
  are created as before, and the pool is refilled;
- :meth:`PortPools.placed` / :meth:`PortPools.listed`: where pods run;
- :meth:`.refill.Refill.start` in ``run``: the refill thread, which changes the
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
from collections.abc import Callable, Container, Iterable, Mapping, Sequence

from oslo_config import cfg

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.making import PortMaker
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


def _as_made(uid: str) -> tuple[str, ...] | None:
    return None


class PortPools:
    """The handler's pools (see the module); ``board`` shows them."""

    def __init__(self, conf: cfg.ConfigOpts, board: PoolBoard | None = None,
                 *, maker: PortMaker, tag: Callable[[], str] = lambda: "",
                 key: PoolKey | None = None, guarded: bool = False) -> None:
        """``maker``: what claims update their ports with; ``tag``: the
        cluster's tag (named in a claimed port's name); ``guarded``: the
        ``network_policy`` handler runs (closed pools are kept; without
        it, a closed port found is given back)."""
        self.opts = conf.vif_pool
        ctl = conf.controller
        #: The base key (node ""): the unbound pool's.
        self.key = key or PoolKey(ctl.pod_network_id, ctl.pod_subnet_id,
                                  str(ctl.project_id))
        self.board = board
        self.lock = threading.Lock()
        self.pools: dict[PoolKey, Pool] = {}
        self.nodes = PoolNodes()
        #: Where pods a NetworkPolicy selects run: the closed pools' nodes.
        self.closed = PoolNodes()
        self.guarded = guarded
        #: Pool ports are bound to their node (until Neutron refuses it).
        self.bind = True
        #: Set when a pool may need work (a port taken, a list adopted).
        self.wake = threading.Event()
        #: The first resync's list was adopted: refilling may start.
        self.adopted = threading.Event()
        self.claims = Claims(int(self.opts.ports_pool_claim_requests), maker)
        self.tag = tag

    @property
    def enabled(self) -> bool:
        return bool(self.opts.enabled) and int(self.opts.ports_pool_max) > 0

    def key_for(self, node: str, closed: bool = False) -> PoolKey:
        """The pool of the ports bound to ``node`` (the base key: ""),
        its closed one if ``closed``."""
        if node or closed:
            return dataclasses.replace(self.key, node=node, closed=closed)
        return self.key

    def of(self, node: str = "", closed: bool = False) -> Pool:
        """``node``'s pool as it is (an empty one if it has none)."""
        with self.lock:
            return self.pools.get(self.key_for(node, closed)) or Pool()

    def wanted(self) -> list[PoolKey]:
        """The nodes' pools that are kept: one per node that runs pods,
        and a closed one per node that runs pods a NetworkPolicy selects
        (:mod:`.nodes`)."""
        idle = float(self.opts.ports_pool_node_idle)
        closed = self.closed.wanted(idle) if self.guarded else []
        return [self.key_for(n) for n in self.nodes.wanted(idle)] + [
            self.key_for(n, True) for n in closed]

    def refilled(self) -> list[PoolKey]:
        """The pools the refill keeps between the marks: the nodes' (see
        :meth:`wanted`), or, without the right to bind, the unbound one
        and the unbound closed one (where some node wants one)."""
        if self.bind:
            return self.wanted()
        idle = float(self.opts.ports_pool_node_idle)
        return [self.key] + ([self.key_for("", True)] if self.guarded
                             and self.closed.wanted(idle) else [])

    def _own(self, node: str, closed: bool = False) -> Pool:
        """The pool a pod on ``node`` counts its hits and misses in (the
        one refilled for it; lock held)."""
        return self.pools.setdefault(
            self.key_for(node if self.bind else "", closed), Pool())

    def placed(self, uid: str, node: str) -> None:
        """Pod ``uid`` needs a port on ``node`` ("": no longer); a node
        new here gets its pool filled at once. Nothing is kept while the
        pools are off (the option is read at start)."""
        if not node:
            self.nodes.leave(uid)
            self.closed.leave(uid)
        elif self.enabled and self.nodes.place(uid, node):
            self.wake.set()

    def listed(self, placed: list[tuple[str, str]],
               selected: Container[str] = ()) -> None:
        """Every pod that needs a port, and its node (a list);
        ``selected``: those a NetworkPolicy selects (their nodes keep a
        closed pool), beside the ones already served as such."""
        if not self.enabled:
            placed = []
        self.nodes.replace(placed)
        if self.closed.replace([(u, n) for u, n in placed
                                if u in selected or u in self.closed]):
            self.wake.set()

    def unbind(self, why: object) -> None:
        """Neutron refuses ``binding:host_id``: new pool ports are made
        unbound, in one pool for every node (warned once); a node's bound
        ports stay its own (a pod never gets another node's port)."""
        with self.lock:
            if not self.bind:
                return
            self.bind = False
            self.pools.setdefault(self.key, Pool())
        LOG.warning("Neutron refuses binding:host_id to the controller "
                    "(%s): new pool ports are made unbound, for any node; "
                    "ports already bound to a node serve its pods alone", why)

    def stop(self) -> None:
        """The handler stops: the claims backing off are not tried again.
        The refill thread is :meth:`.refill.Refill.start`'s."""
        self.claims.stop()

    # -- the resync's list ---------------------------------------------------------
    def adopt(self, listed: Iterable[osa.Port], pods: Pods | None = None,
              named: Iterable[tuple[str, Sequence[str]]] = (),
              groups: Callable[[str], tuple[str, ...] | None] = _as_made
              ) -> list[osa.Port]:
        """``listed`` without its free pool ports, which are re-adopted
        into their nodes' pools. A pool port a pod holds (claimed here, or
        named by its written PodPort: ``named``, (uid, (port id, address,
        MAC))) stays in the list as that pod's, and an update not yet
        applied is made again, bound to the pod's node like the first (a
        closed port's in its pod's groups, ``groups``: pod UID -> its
        groups);
        not for a finished pod (its port is released as a deleted pod's,
        never claimed again)."""
        pods = pods or {}
        holder = {n[0]: uid for uid, n in named}
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
            pod = pods.get(uid)
            if pod is not None and not pod.finished:
                self.claims.submit(port, uid,
                                   port_name(pods, uid, self.tag()),
                                   pod.node, self._groups(port, uid, groups))
        new = self.keep(waiting)
        if new and not self.adopted.is_set():
            LOG.info("port pools: %d ports found in Neutron, kept", new)
        self.adopted.set()
        self.wake.set()
        return rest

    def _groups(self, port: osa.Port, uid: str,
                groups: Callable[[str], tuple[str, ...] | None]
                ) -> tuple[str, ...] | None:
        """The groups a claim made again sets: a closed port's pod's
        (``groups``; its first claim set them), else none (a port in the
        default group keeps it: a pod no policy selects must not lose
        it because the policies are not known yet)."""
        if not poolports.closed(port, self.tag()):
            return None
        try:
            return groups(uid)
        except osa.OpenStackError as exc:
            LOG.info("pool port %s of pod %s: its groups not known (%s): "
                     "claimed in none, the network_policy handler sets "
                     "them", port.id, uid, exc)
            return None

    def keep(self, ports: Iterable[osa.Port]) -> int:
        """Free pool ports into their nodes' pools (known ones are left
        where they are; a closed port into its node's closed pool); how
        many were new. The ports of a pool with a
        batch being made are left to that batch's answer (:meth:`made`):
        Neutron lists a bulk create's ports before it answers, and a port
        kept from the list, then handed to a pod, was put back as free by
        the answer, for a second pod to take."""
        new, tag = 0, self.tag()
        with self.lock:
            known = {pid for pool in self.pools.values() for pid in pool.free}
            for port in ports:
                if port.id in known or self.claims.owner(port.id):
                    continue
                closed = poolports.closed(port, tag)
                key = self.key_for(port.host, closed)   # where it is bound
                if key in self.pools and self.pools[key].creating:
                    continue        # the batch's answer brings it
                self.pools.setdefault(key, Pool()).free[port.id] = port
                new += 1
                if key.node:
                    (self.closed if closed else self.nodes).heard_of(
                        key.node)
        return new

    # -- pods ------------------------------------------------------------------------
    def serve(self, create: list[str], pods: Pods, *,
              groups: Mapping[str, tuple[str, ...]] | None = None
              ) -> Served:
        """Pool ports for the pods ``create`` (each bound to its node), at
        once (see the module); their updates follow in the background
        (:mod:`.claims`). A pod ``groups`` names (a NetworkPolicy selects
        it: its security groups) takes a closed port, its groups in its
        background claim; when its node's closed pool is empty, a port
        in the default group, which the caller claims itself before its
        PodPort (:attr:`~.records.Served.own`). A pod's node gets a pool
        on first demand, a closed one on a selected pod's."""
        groups = groups or {}
        if not self.enabled or not create:
            return Served(rest=list(create))
        out, closed = Served(), set()
        with self.lock:
            for uid in create:
                pod = pods.get(uid)
                if pod is None:
                    out.rest.append(uid)
                    continue
                node, selected = pod.node, uid in groups
                if selected and self.closed.place(uid, node):
                    self.wake.set()
                port = self._take(node, True) if selected else None
                if port is not None:
                    closed.add(uid)
                else:
                    port = self._take(node)
                if port is None:
                    out.rest.append(uid)
                    continue
                out.taken.append((uid, port))
                if selected and uid not in closed:
                    out.own.add(uid)
        tag = self.tag()
        for uid, port in out.taken:
            if uid not in out.own:
                self.claims.submit(port, uid, port_name(pods, uid, tag),
                                   pods[uid].node, groups.get(uid))
        self.wake.set()
        self.publish()
        return out

    def _take(self, node: str, closed: bool = False) -> osa.Port | None:
        """A free port for a pod on ``node`` (of its closed pools if
        ``closed``), taken out of its pool and counted there as a hit,
        None counted as a miss (lock held): its node's own ports first,
        else an unbound one (bound to the node by its claim); never
        another node's."""
        mine = self.pools.get(self.key_for(node, closed)) if node else None
        spare = self.pools.get(self.key_for("", closed))
        source = mine if mine is not None and mine.free else spare
        counted = self._own(node, closed)
        if source is None or not source.free:
            counted.misses += 1
            return None
        counted.hits += 1
        return source.free.pop(next(iter(source.free)))

    def take_fullest(self, node: str, closed: bool = False
                     ) -> osa.Port | None:
        """A free port of the fullest pool that is not ``node``'s own (a
        pod on ``node`` starves: the quota is used up), taken out of it;
        None when no pool has one. Closed pools only if ``closed`` (the
        pod's claim sets its groups: a pod no policy selects would stay
        in none)."""
        with self.lock:
            mine = self.key_for(node)
            pools = [(len(p.free), k) for k, p in self.pools.items()
                     if k != mine and p.free and (closed or not k.closed)]
            if not pools:
                return None
            _, key = max(pools, key=lambda t: (t[0], t[1].node,
                                               not t[1].closed))
            pool = self.pools[key]
            return pool.free.pop(next(reversed(pool.free)))

    # -- the refill's ------------------------------------------------------------
    def any_free(self) -> osa.Port | None:
        """One free port of any pool (None: none)."""
        with self.lock:
            return next((p for pool in self.pools.values()
                         for p in pool.free.values()), None)

    def extra(self, spare: Iterable[str] = ()
              ) -> list[tuple[PoolKey, list[osa.Port]]]:
        """Take out the free ports above each pool's high-water mark (all
        of them when the pools are off or the pool's node is idle), to be
        given back, but those of ``spare`` (a give-back that failed, tried
        later); an idle node's pool goes, and so does the unbound one of a
        bound mode (never refilled) once empty."""
        high = int(self.opts.ports_pool_max) if self.enabled else 0
        wanted = set(self.wanted()) | set(self.refilled())
        skip = set(spare)
        extra: list[tuple[PoolKey, list[osa.Port]]] = []
        with self.lock:
            for key, pool in list(self.pools.items()):
                idle = key not in wanted and key != self.key
                ids = [i for i in list(pool.free)[0 if idle else high:]
                       if i not in skip]
                if ids:
                    extra.append((key, [pool.free.pop(i) for i in ids]))
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
        wanted = self.refilled()
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
        """That batch is over: ``ports`` were made (none: it failed). Each
        lands in the pool of the node it is bound to (a batch made unbound,
        once Neutron refused the binding, in the unbound one)."""
        with self.lock:
            pool = self.pools.get(key)
            if pool is not None:
                pool.creating -= count
            for port in ports:
                self.pools.setdefault(self.key_for(port.host, key.closed),
                                      Pool()).free[port.id] = port
        self.publish()

    # -- figures -----------------------------------------------------------------------
    def publish(self) -> None:
        if self.board is None:
            return
        with self.lock:
            # A disabled pool that never held a port is not shown.
            rows = [(key, dataclasses.replace(pool, free={}),
                     len(pool.free)) for key, pool in sorted(
                         self.pools.items(),
                         key=lambda kv: (kv[0].node, kv[0].closed))
                    if self.enabled or pool.free or pool.given_back]
        low = int(self.opts.ports_pool_min) if self.enabled else 0
        high = int(self.opts.ports_pool_max) if self.enabled else 0
        self.board.publish_all([(key.label, {
            "free": free, "creating": pool.creating, "hits": pool.hits,
            "misses": pool.misses, "given_back": pool.given_back,
            "low": low, "high": high}) for key, pool, free in rows])
