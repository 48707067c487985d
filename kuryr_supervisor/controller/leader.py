"""Leader election for the controller's handler worker (``[controller]
leader_election``): only one replica's handlers act.

The worker waits, beating, until it holds the Lease; a daemon thread then
renews it every third of its duration, and if the lease cannot be renewed
before it runs out the worker exits at once (status 1), so the handlers of
a replica that lost the lease never act beside the new leader's; the
supervisor restarts the worker as a follower.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.lease import LeaderElector

LOG = logging.getLogger(__name__)


def identity() -> str:
    """This replica: the pod name in Kubernetes (hostname), and the pid."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}"


def wait_for_leadership(conf: cfg.ConfigOpts, stopping: threading.Event,
                        beat: Callable[[], None]) -> bool:
    """Block until leading (True) or stopping (False); then keep the lease."""
    opts = conf.controller
    elector = LeaderElector(K8sClient.from_conf(conf),
                            namespace=opts.lease_namespace,
                            name=opts.lease_name, identity=identity(),
                            duration=int(opts.lease_duration))
    interval = float(conf.supervisor.heartbeat_interval)
    next_try = 0.0
    waited = 0.0
    while not stopping.is_set():
        beat()
        if waited >= next_try:
            if elector.try_acquire_or_renew():
                threading.Thread(target=_keep, args=(elector, stopping),
                                 name="lease", daemon=True).start()
                return True
            next_try = waited + elector.retry_period
        stopping.wait(interval)
        waited += interval
    return False


def _keep(elector: LeaderElector, stopping: threading.Event) -> None:
    while not stopping.wait(elector.retry_period):
        elector.try_acquire_or_renew()
        if not elector.leading() and not stopping.is_set():
            LOG.error("lost the controller lease; handlers stop now")
            os._exit(1)
