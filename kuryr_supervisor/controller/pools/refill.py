"""The port pools' background thread: refill, and give back.

Every ``ports_pool_update_frequency`` seconds, and at once when a pod took
a port or a resync adopted the list, the thread looks at every pool (one
per node that runs pods, :mod:`.nodes`; or the one unbound pool):

- a pool holding more free ports than ``ports_pool_max`` (or any, when
  the pools are disabled, or its node has had no pod for
  ``ports_pool_node_idle`` seconds) gives the extra ones back to Neutron
  (deletes them, newest first); an idle node's pool then goes away;
- a pool with fewer free ports than ``ports_pool_min`` is refilled, a
  bulk create of ``ports_pool_batch`` ports at a time (bound to the
  pool's node; a closed pool's in no security group), until it holds ``ports_pool_min`` again; never more than
  ``ports_pool_max`` free or being made in one pool, nor, over all pools,
  more than the project's port quota has left less one port per node
  that runs pods (room for a miss on each; read before each round of
  batches, one batch per pool and round, the emptiest pools first).

Its ports are made through the one path every port is made by
(:mod:`~kuryr_supervisor.controller.openstack.making`: bound, tagged,
checked). A binding Neutron refuses (its policy: a member role) makes
new pool ports unbound (:meth:`.portpools.PortPools.unbind`). While pods'
claims are on their way to Neutron (:mod:`.claims`) it makes no port:
those updates come first; a claim backing off after a failure does not
hold it back. A give-back that fails (a 403 on a DELETE) leaves its
ports in their pool, tried again a minute later; it holds back no
other pool's refill. It reads, once, the subnet a PodPort of a
pool port needs, so the first pod of a burst does not wait for it. It
starts only after the first resync adopted the pool ports already in
Neutron (a restart keeps them, it does not make new ones), and it waits
out failures (an outage, an exhausted quota) until its next turn, logging
once per change. A bulk create whose answer was lost may still have made
its ports: the thread lists the pool ports at its next turn and adopts
them (so does every resync), and a pool that then holds too many gives
the extra back.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.making import PortMaker
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.pools import poolports
from kuryr_supervisor.controller.pools.portpools import PortPools
from kuryr_supervisor.controller.pools.records import PoolKey

LOG = logging.getLogger(__name__)

#: Seconds a port whose give-back failed stays in its pool before the
#: give-back is tried again.
RETRY_GIVE_BACK = 60.0


class Refill:
    """The pools' refill and give-back (see the module); ``owned`` gives
    the scope (network, cluster tag, project); ``maker`` makes the pools'
    ports as the pods' are made (by default the claims' own); ``pace``
    sizes each create's timeout as the pods' creates are sized."""

    def __init__(self, pools: PortPools, cloud: osa.OpenStack, owned: Any,
                 pace: Pace, maker: PortMaker | None = None, *,
                 clock: Any = time.monotonic) -> None:
        self.pools, self.cloud, self.owned = pools, cloud, owned
        self.pace = pace
        self.maker = maker or pools.claims.maker
        self._failing = ""
        self._warm = False
        self._relist = False
        self._clock = clock
        #: port id -> when its failed give-back may be tried again
        self._kept: dict[str, float] = {}

    def start(self, stopping: threading.Event) -> threading.Thread:
        """The refill thread (which also gives back what a smaller or
        disabled pool holds), until ``stopping``."""
        thread = threading.Thread(target=self.run, args=(stopping,),
                                  name="pool-refill", daemon=True)
        thread.start()
        return thread

    def run(self, stopping: threading.Event) -> None:
        opts = self.pools.opts
        while not stopping.is_set():
            if self.pools.adopted.is_set():
                try:
                    self.step(stopping)
                    self._ok()
                except Exception as exc:  # noqa: BLE001 - waited out, logged
                    self._failed(exc)
            self.pools.publish()
            self.pools.wake.wait(float(opts.ports_pool_update_frequency))
            self.pools.wake.clear()

    def step(self, stopping: threading.Event) -> None:
        self.relist()
        self.give_back()
        self.warm()
        # Pods first: their ports' updates go before a refill's creates
        # (a real Neutron serves a few requests at a time); a claim that
        # keeps failing backs off and holds nothing back.
        while self.pools.enabled and not stopping.is_set() \
                and not self.pools.claims.busy():
            work = self.pools.shortfalls()
            if not work:
                return
            left = self.cloud.port_quota(self._project()).left
            if left is not None:
                # Room for a miss on every node that runs pods: its first
                # pod, or a pod its empty pool cannot serve, gets a port.
                left -= len(self.pools.wanted())
            for key, count in work:
                if left is not None:
                    if left <= 0:
                        raise osa.QuotaExceeded(
                            "the project's port quota is used up, but for "
                            "a port per node")
                    count = min(count, left)
                    left -= count
                if not self.refill(key, count) or stopping.is_set() \
                        or self.pools.claims.busy():
                    break
            self.warm()

    def relist(self) -> None:
        """After a bulk create whose answer was lost: the pool ports
        Neutron holds (they may have been made), adopted now rather than
        at the next resync. Ports a pod holds (a claim not yet applied)
        are skipped: they are that pod's."""
        if not self._relist:
            return
        ports = self.cloud.ports_of(poolports.POOL_DEVICE,
                                    network_id=self.owned.network_id,
                                    tag=self.owned.tag)
        new = self.pools.keep(ports)
        self._relist = False
        if new:
            LOG.info("port pools: %d ports of a lost answer found, kept", new)

    def warm(self) -> None:
        """Read once what a PodPort of a pool port needs (its subnet), so
        the first pod of a burst does not wait for it."""
        if self._warm:
            return
        port = self.pools.any_free()
        if port is not None:
            try:
                self.owned.data(port.device_id, port)
            except ValueError:
                pass                    # reported when a pod needs it
            self._warm = True

    def give_back(self) -> None:
        """Ports above each pool's high-water mark (all of them when the
        pools are off or the pool's node is idle) back to Neutron; a pool
        whose give-back fails keeps its ports (tried again later) and no
        other pool waits for it."""
        now = self._clock()
        self._kept = {p: t for p, t in self._kept.items() if t > now}
        for key, ports in self.pools.extra(self._kept):
            gone, left = 0, list(ports)
            try:
                for port in ports[::-1]:            # newest first
                    gone += poolports.give_back(self.cloud, [port.id])
                    left.remove(port)
            except osa.OpenStackError as exc:
                LOG.warning("port pool %s: %d ports not given back (%s); "
                            "kept, tried again in %g s", key.label, len(left),
                            exc, RETRY_GIVE_BACK)
                self._kept.update(dict.fromkeys(
                    (p.id for p in left), now + RETRY_GIVE_BACK))
                self.pools.keep(left)
            self.pools.gave_back(key, gone)
            if gone:
                LOG.info("port pool %s: gave %d ports back to Neutron",
                         key.label, gone)

    def refill(self, key: PoolKey, count: int) -> bool:
        """One batch for ``key``'s pool; False when the pools just turned
        unbound (the keys changed)."""
        pools = self.pools
        pools.making(key, count)
        try:
            ports = poolports.create(self.maker, self.pace,
                                     tag=self.owned.tag, count=count,
                                     host=key.node if pools.bind else "",
                                     closed=key.closed)
        except osa.OpenStackRefused:
            pools.made(key, count)      # nothing was made
            raise
        except Exception:
            self._relist = True         # made or not: Neutron will say
            pools.made(key, count)
            raise
        pools.made(key, count, ports)
        if key.node and not self.maker.modes.bind:
            pools.unbind("a pool port's create")
            return False
        LOG.debug("port pool %s: %d ports made", key.label, count)
        return True

    def _project(self) -> str:
        return str(self.owned.project_id) or self.cloud.token().project_id

    def _ok(self) -> None:
        if self._failing:
            LOG.info("port pools: refilling again")
            self._failing = ""

    def _failed(self, exc: Exception) -> None:
        what = type(exc).__name__
        if what != self._failing:
            LOG.warning("port pools: not refilled: %s", exc)
            self._failing = what
