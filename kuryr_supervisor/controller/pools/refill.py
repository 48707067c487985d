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
  pool's node), until it holds ``ports_pool_min`` again; never more than
  ``ports_pool_max`` free or being made in one pool, nor, over all pools,
  more than the project's port quota has left (read before each round of
  batches, one batch per pool and round, the emptiest pools first).

A create refused because of ``binding:host_id`` (Neutron's policy: a
member role) turns the pools unbound (:meth:`.portpools.PortPools.unbind`).
While pods' claims are being applied (:mod:`.claims`) it makes no
port: those updates come first. It reads, once, the subnet a PodPort of a
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
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.openstack.wire import binding_refused
from kuryr_supervisor.controller.pools import poolports
from kuryr_supervisor.controller.pools.portpools import PortPools
from kuryr_supervisor.controller.pools.records import PoolKey

LOG = logging.getLogger(__name__)


def start(pools: PortPools, cloud: osa.OpenStack, owned: Any, pace: Pace,
          stopping: threading.Event) -> threading.Thread:
    """The refill thread of ``pools`` (which also gives back what a
    smaller or disabled pool holds), until ``stopping``; ``pace`` sizes
    each create's timeout as the pods' creates are sized."""
    pools.attach(cloud, stopping)
    thread = threading.Thread(target=Refill(pools, cloud, owned, pace).run,
                              args=(stopping,), name="pool-refill",
                              daemon=True)
    thread.start()
    return thread


class Refill:
    """The pools' refill and give-back (see the module); ``owned`` gives
    the scope (network, cluster tag, project)."""

    def __init__(self, pools: PortPools, cloud: osa.OpenStack, owned: Any,
                 pace: Pace) -> None:
        self.pools, self.cloud, self.owned = pools, cloud, owned
        self.pace = pace
        self._failing = ""
        self._warm = False
        self._relist = False

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
        # (a real Neutron serves a few requests at a time).
        while self.pools.enabled and not stopping.is_set() \
                and not len(self.pools.claims):
            work = self.pools.shortfalls()
            if not work:
                return
            left = self.cloud.port_quota(self._project()).left
            for key, count in work:
                if left is not None:
                    if left <= 0:
                        raise osa.QuotaExceeded(
                            "the project's port quota is used up")
                    count = min(count, left)
                    left -= count
                if not self.refill(key, count) or stopping.is_set() \
                        or len(self.pools.claims):
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
        pools are off or the pool's node is idle) back to Neutron."""
        for key, ids in self.pools.extra():
            gone = poolports.give_back(self.cloud, ids[::-1])
            self.pools.gave_back(key, gone)
            LOG.info("port pool %s: gave %d ports back to Neutron",
                     key.label, len(ids))

    def refill(self, key: PoolKey, count: int) -> bool:
        """One batch for ``key``'s pool; False when the pools just turned
        unbound (the keys changed)."""
        pools = self.pools
        pools.making(key, count)
        try:
            ports = poolports.create(
                self.cloud, self.pace, network_id=self.owned.network_id,
                subnet_id=key.subnet_id, tag=self.owned.tag, count=count,
                host=key.node)
        except osa.OpenStackRefused as exc:
            pools.made(key, count)      # nothing was made
            if key.node and binding_refused(exc):
                pools.unbind(exc)
                return False
            raise
        except Exception:
            self._relist = True         # made or not: Neutron will say
            pools.made(key, count)
            raise
        pools.made(key, count, ports)
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
