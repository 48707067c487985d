"""What the HealthManager concludes: why the daemon is not live, which
persistent faults it has, and the overall verdict it publishes."""
from __future__ import annotations

import dataclasses
import enum


class LiveCause(enum.IntEnum):
    """The first failing liveness cause, published by the HealthManager.

    The master reads it to apply ``worker_death_policy = exit``; each cause has
    its own documented exit status (see :mod:`kuryr_supervisor.exitcodes`).
    """

    NONE = 0
    RESTART_BUDGET = 1
    CNI_FAILURES = 2
    MEMORY = 3
    NETLINK = 4
    CHECKER_STALE = 5
    COMPONENT = 6    # a worker dead or stale: the supervisor restarts it
    HANDLER_FAILURES = 7   # controller: consecutive handler failures


class Fault(enum.IntFlag):
    """Persistent environment faults the Server found (a bit set each).

    Restarting cannot fix them, so they fail readiness naming the cause and
    never count against the CNI ADD failure budget.
    """

    NONE = 0
    SOCKET = 1          # the CNI socket file was deleted or replaced
    IPAM_STORE = 2      # the allocation store is corrupt or unreadable
    BRIDGE_KIND = 4     # the configured bridge name is another kind of link
    NET_ADMIN = 8       # netlink refused for lack of CAP_NET_ADMIN
    DISK_FULL = 16      # the state directory's file system is full or read-only
    SOCKET_BLOCKED = 32     # a file, or a server not ours, holds the socket path
    SOCKET_UNTRUSTED = 64   # the socket's directory is not root's alone
    #: Every fault about the CNI socket file (the master reports them).
    SOCKET_ANY = SOCKET | SOCKET_BLOCKED | SOCKET_UNTRUSTED
    # Controller role (written by the neutron_port handler's process alone):
    SUBNET_FULL = 128   # Neutron has no address left for a pod's port
    SWEEP_UNPROVEN = 256  # Neutron ignored the tag filter: the sweep is off
    PORT_LOST = 512     # a pod's port vanished and cannot be made again
    NETWORK_MISSING = 1024  # the pod network is gone (404 NetworkNotFound)
    SUBNET_MISSING = 2048   # the pod subnet is gone (404 SubnetNotFound)
    NEUTRON_FORBIDS = 4096  # Neutron's policy forbids the port creates (403)
    PODS_LAGGING = 8192  # a pod list lacked pods that exist (watch cache)


class Mode(enum.IntFlag):
    """How the controller's port handler makes ports, as Neutron allows
    it (written by the neutron_port handler's process; readiness says
    it). Not faults: none makes the controller unready."""

    NONE = 0
    TAGS_AT_CREATE = 1      # Neutron keeps a create's tags
    TAGS_AFTER_CREATE = 2   # tags set after each create (tags API)
    MACS_DERIVED = 4        # MACs derived from the pods' UIDs: idempotent
    MACS_NEUTRONS = 8       # Neutron's MACs (policy): lost creates waited for
    UNBOUND = 16            # binding:host_id refused: ports made unbound


@dataclasses.dataclass(frozen=True)
class Overall:
    """The HealthManager's last verdict, as published for the master."""

    live: bool
    ready: bool
    cause: LiveCause
    checked_at: float     # monotonic; 0 when no verdict yet
    summary: str
