"""The port pools' background thread: refill, and give back.

Every ``ports_pool_update_frequency`` seconds, and at once when a pod took
a port or a resync adopted the list, the thread looks at the pool:

- a pool holding more free ports than ``ports_pool_max`` (or any, when
  the pool is disabled) gives the extra ones back to Neutron (deletes
  them, newest first);
- a pool with fewer free ports than ``ports_pool_min`` is refilled, a
  bulk create of ``ports_pool_batch`` ports at a time, until it holds
  ``ports_pool_min`` again; never more than ``ports_pool_max`` free or
  being made, nor more than the project's port quota has left (read
  before each batch).

While pods' claims are being applied (:mod:`.poolclaim`) it makes no
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

from kuryr_supervisor.controller import openstack as osa
from kuryr_supervisor.controller import poolneutron
from kuryr_supervisor.controller.portpool import PortPools

LOG = logging.getLogger(__name__)


class Refill:
    """One pool's refill and give-back (see the module); ``owned`` gives
    the scope (network, cluster tag, project)."""

    def __init__(self, pools: PortPools, cloud: osa.OpenStack,
                 owned: Any) -> None:
        self.pools, self.cloud, self.owned = pools, cloud, owned
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
            count = self.shortfall()
            if count <= 0:
                return
            self.refill(count)
            self.warm()

    def relist(self) -> None:
        """After a bulk create whose answer was lost: the pool ports
        Neutron holds (they may have been made), adopted now rather than
        at the next resync. Ports a pod holds (a claim not yet applied)
        are skipped: they are that pod's."""
        if not self._relist:
            return
        ports = self.cloud.ports_of(poolneutron.POOL_DEVICE,
                                    network_id=self.owned.network_id,
                                    tag=self.owned.tag)
        pools = self.pools
        with pools.lock:
            new = [p for p in ports if p.id not in pools.pool.free
                   and not pools.claims.owner(p.id)]
            pools.pool.free.update((p.id, p) for p in new)
        self._relist = False
        if new:
            LOG.info("port pool %s: %d ports of a lost answer found, kept",
                     pools.key.label, len(new))

    def warm(self) -> None:
        """Read once what a PodPort of a pool port needs (its subnet), so
        the first pod of a burst does not wait for it."""
        if self._warm:
            return
        with self.pools.lock:
            port = next(iter(self.pools.pool.free.values()), None)
        if port is not None:
            try:
                self.owned.data(port.device_id, port)
            except ValueError:
                pass                    # reported when a pod needs it
            self._warm = True

    def give_back(self) -> None:
        pools = self.pools
        high = int(pools.opts.ports_pool_max) if pools.enabled else 0
        with pools.lock:
            pool = pools.pool
            extra = list(pool.free)[high:] if len(pool.free) > high else []
            for port_id in extra:
                del pool.free[port_id]
        if extra:
            gone = poolneutron.give_back(self.cloud, extra[::-1])
            with pools.lock:
                pool.given_back += gone
            LOG.info("port pool %s: gave %d ports back to Neutron",
                     pools.key.label, len(extra))

    def shortfall(self) -> int:
        """Ports the next batch makes (0: none needed or none allowed)."""
        opts = self.pools.opts
        with self.pools.lock:
            pool = self.pools.pool
            have = len(pool.free) + pool.creating
        if have >= int(opts.ports_pool_min):
            return 0
        count = min(int(opts.ports_pool_batch),
                    int(opts.ports_pool_max) - have)
        if count <= 0:
            return 0
        left = self.cloud.port_quota(self._project()).left
        if left is not None and left < count:
            if left <= 0:
                raise osa.QuotaExceeded("the project's port quota is used up")
            count = left
        return count

    def refill(self, count: int) -> None:
        pools = self.pools
        with pools.lock:
            pools.pool.creating += count
        pools.publish()
        try:
            ports = poolneutron.create(
                self.cloud, network_id=self.owned.network_id,
                subnet_id=pools.key.subnet_id, tag=self.owned.tag,
                count=count)
        except osa.OpenStackRefused:
            raise                       # nothing was made
        except Exception:
            self._relist = True         # made or not: Neutron will say
            raise
        finally:
            with pools.lock:
                pools.pool.creating -= count
        with pools.lock:
            pools.pool.free.update((p.id, p) for p in ports)
        pools.publish()
        LOG.debug("port pool %s: %d ports made", pools.key.label, count)

    def _project(self) -> str:
        return str(self.owned.project_id) or self.cloud.token().project_id

    def _ok(self) -> None:
        if self._failing:
            LOG.info("port pool %s: refilling again", self.pools.key.label)
            self._failing = ""

    def _failed(self, exc: Exception) -> None:
        what = type(exc).__name__
        if what != self._failing:
            LOG.warning("port pool %s: not refilled: %s", self.pools.key.label,
                        exc)
            self._failing = what
