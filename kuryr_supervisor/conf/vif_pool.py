"""[vif_pool]: Neutron ports made ahead of time, handed to pods at once.

Kuryr's option names (``ports_pool_min``, ``ports_pool_max``,
``ports_pool_batch``, ``ports_pool_update_frequency``) with Kuryr's meaning,
so a Kuryr operator finds the same knobs, and Kuryr's pool key: network,
subnet, project, security groups and the node its ports are bound to. Off by default, as Kuryr's
``vif_pool_driver = noop``: a pool holds ports (project quota, addresses of
the pod subnet) that no pod uses, which an operator should choose to spend.
"""
from __future__ import annotations

from oslo_config import cfg

GROUP = "vif_pool"

OPTS: list[cfg.Opt] = [
    cfg.BoolOpt("enabled", default=False,
                help="Keep ports made ahead of time for the neutron_port "
                     "handler: a pod takes one at once (its PodPort written "
                     "without waiting for Neutron; the port's device_id, "
                     "name and binding:host_id updated in the background) "
                     "instead of waiting for a create. Off: no port is made "
                     "ahead, and ports a pool left in Neutron are given "
                     "back (deleted)."),
    cfg.IntOpt("ports_pool_min", default=10, min=0, max=1000,
               help="Low-water mark: when fewer free ports than this remain "
                    "in a pool it is refilled in the background, a batch at "
                    "a time. Pools are per node (ports bound to it), so "
                    "this applies to each node: size it to the largest "
                    "burst of pods one node should start without waiting "
                    "for Neutron."),
    cfg.IntOpt("ports_pool_max", default=50, min=0, max=10000,
               help="High-water mark: a pool (one per node) never holds "
                    "more free ports than this (ports beyond it, e.g. left "
                    "from a larger setting, are deleted); 0 makes no port "
                    "ahead and gives every free one back. All pools "
                    "together never take more than the project's port "
                    "quota has left."),
    cfg.IntOpt("ports_pool_batch", default=10, min=1, max=100,
               help="Ports made by one bulk create when refilling. A real "
                    "Neutron takes 0.1-0.2 s a port whatever the batch, so "
                    "a batch bounds how long one request runs, not the "
                    "total."),
    cfg.FloatOpt("ports_pool_update_frequency", default=5.0, min=0.1,
                 max=3600.0,
                 help="Seconds between checks of every pool's size (a pool "
                      "that a pod took a port from is checked at once)."),
    cfg.FloatOpt("ports_pool_node_idle", default=3600.0, min=0.0,
                 max=30 * 86400.0,
                 help="Seconds a node keeps its pool once it runs no pod on "
                      "the pod network (drained, or deleted from the API: "
                      "its pods are deleted with it); then the pool's ports "
                      "are given back to Neutron, and the node's next pod "
                      "starts a new pool. 0 keeps every node's pool."),
    cfg.IntOpt("ports_pool_claim_requests", default=4, min=1, max=64,
               help="Port updates sent at once, in the background, when a "
                    "burst of pods takes ports from a pool: about the "
                    "Neutron API's request threads (more only queue there, "
                    "ahead of the controller's other calls); the pool is "
                    "not refilled until they are applied."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    opts = conf.vif_pool
    if opts.ports_pool_max and opts.ports_pool_min > opts.ports_pool_max:
        raise ValueError(f"invalid value for [vif_pool] ports_pool_min: "
                         f"{opts.ports_pool_min} is above ports_pool_max "
                         f"({opts.ports_pool_max})")
