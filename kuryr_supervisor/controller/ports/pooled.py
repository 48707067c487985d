"""The port handler's writing steps with a port pool in front.

:class:`PooledWrites` is :class:`~.provision.PortWrites` whose
``_create_and_write`` first gives pods a pool port (:mod:`~kuryr_supervisor.controller.pools.portpools`,
``[vif_pool]``): a pod with no create in flight takes a free port at once,
its PodPort is written like any other's, and only the pods the pool could
not serve (a miss) go on to be created. Kept apart so the pool touches the
handler in one place.
"""
from __future__ import annotations

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.pools.portpools import PortPools
from kuryr_supervisor.controller.ports.provision import PortWrites


class PooledWrites(PortWrites):
    """See the module; the handler sets ``pools``."""

    pools: PortPools

    def _create_and_write(self, create: list[str],
                          write: list[tuple[str, osa.Port]]) -> None:
        """Pool ports first ([vif_pool], :mod:`~kuryr_supervisor.controller.pools.portpools`) for pods with no
        create in flight; the rest as :class:`PortWrites` makes them."""
        now = self.pace.now()
        free = [u for u in create if self.inflight.get(u, 0.0) <= now]
        served = self.pools.serve(free, self.pods, self.nodes)
        for uid, port in served.taken:
            self.pods[uid] = (*self.pods[uid][:2], port.id)
        rest = set(served.rest) | (set(create) - set(free))
        super()._create_and_write([u for u in create if u in rest],
                                  write + served.taken)
        if not self.bind_hosts:         # Neutron refused binding:host_id
            self.pools.unbind("a pod's port create was refused")
