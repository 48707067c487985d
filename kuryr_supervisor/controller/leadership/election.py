"""Leader election for the controller's handler processes (``[controller]
leader_election``): only one replica's handlers act.

Each handler process waits, beating, until its replica holds the Lease
(asking at least every second, so that it leads within a second of the
Lease running out, whatever ``lease_duration``); a
daemon thread then renews it every third of its duration, and if the lease
cannot be renewed before it runs out the process exits at once (status 1),
so the handlers of a replica that lost the lease never act beside the new
leader's; the supervisor restarts the process as a follower. Between two
renewals the write fence (:class:`~kuryr_supervisor.kubernetes.fence.WriteFence`
over the elector, built here and handed to the handler) stops
a process that was paused past its lease before its first write: every
Neutron write and PodPort write checks, without I/O, that the lease was
renewed within its duration, and a Neutron write checks again before each
write to its socket (:mod:`~kuryr_supervisor.controller.openstack.sendfence`).
What a fence cannot stop, a create already at Neutron, the next leader
waits out (:mod:`.announcer`).

The candidate is the replica, not the process: every handler process of one
daemon uses the same identity (the pod name and the master's pid), so all
of them lead together, and a handler process restarted by the supervisor
finds the Lease already its own instead of waiting for it to expire.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor import useragent
from kuryr_supervisor.controller.leadership import announcer
from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.fence import WriteFence
from kuryr_supervisor.kubernetes.lease import LeaderElector

LOG = logging.getLogger(__name__)


def identity(master_pid: int) -> str:
    """This replica: the pod name in Kubernetes (hostname), and the pid of
    its master (shared by all its handler processes)."""
    return f"{useragent.replica_name()}_{master_pid}"


@dataclasses.dataclass(frozen=True)
class Leading:
    """What a handler process that leads hands its handler: the write
    fence over its lease, and the creates Lease its creates are announced
    in (:mod:`.announcer`)."""

    fence: WriteFence
    announcer: announcer.CreateLease


def wait_for_leadership(conf: cfg.ConfigOpts, stopping: threading.Event,
                        beat: Callable[[], None], *,
                        master_pid: int) -> Leading | None:
    """Block until leading (then keep the lease from a thread of its own)
    or stopping (None)."""
    opts = conf.controller
    elector = LeaderElector(K8sClient.from_conf(conf, master_pid=master_pid),
                            namespace=opts.lease_namespace,
                            name=opts.lease_name, identity=identity(master_pid),
                            duration=int(opts.lease_duration))
    interval = float(conf.supervisor.heartbeat_interval)
    # By the clock, not by counting waits: an attempt's own time (an API
    # call) must not push the next one later.
    next_try = 0.0
    while not stopping.is_set():
        beat()
        if time.monotonic() >= next_try:
            if elector.try_acquire_or_renew():
                threading.Thread(target=_keep, args=(elector, stopping),
                                 name="lease", daemon=True).start()
                # From now on this process writes only while it holds the
                # lease; the creates Lease has its own client (the lease
                # thread has the elector's).
                return Leading(WriteFence(elector.leading, elector.left),
                               announcer.CreateLease(
                                   K8sClient.from_conf(
                                       conf, master_pid=master_pid),
                                   namespace=opts.lease_namespace,
                                   name=opts.lease_name + announcer.SUFFIX,
                                   identity=elector.identity))
            next_try = time.monotonic() + elector.acquire_period
        stopping.wait(min(interval, max(0.01, next_try - time.monotonic())))
    return None


def _keep(elector: LeaderElector, stopping: threading.Event) -> None:
    while not stopping.wait(elector.retry_period):
        elector.try_acquire_or_renew()
        if not elector.leading() and not stopping.is_set():
            LOG.error("lost the controller lease; handlers stop now")
            os._exit(1)
