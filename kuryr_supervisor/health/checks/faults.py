"""Readiness ``cni-environment``: persistent environment faults, by name.

The Server raises a :class:`~kuryr_supervisor.state.Fault` bit when it meets
a fault that no restart can fix (its socket file deleted or replaced, the
IPAM store corrupt or unreadable, the bridge name taken by another kind of
link, no CAP_NET_ADMIN, a full or read-only state disk). Such a fault makes
every ADD fail, so it must take the node out of the kubelet's rotation
(readiness) and tell the operator what to fix; it must not exhaust the ADD
failure budget and get the daemon restarted into the same fault.

Reads shared memory only, so it runs on every probe request.
"""
from __future__ import annotations

from oslo_config import cfg

from kuryr_supervisor.health.checks.base import Check, Kind, Result
from kuryr_supervisor.state import Fault, SharedState


def describe(fault: Fault, conf: cfg.ConfigOpts) -> str:
    """What is wrong and what to do, for one fault bit."""
    if fault is Fault.SOCKET:
        return (f"CNI socket {conf.cni_daemon.bind_address} was deleted or "
                "replaced; the master is binding it again (check what "
                "removes files in its directory)")
    if fault is Fault.SOCKET_BLOCKED:
        return (f"CNI socket {conf.cni_daemon.bind_address} cannot be bound "
                "again: a file that is not a socket, or a server that is "
                "not this daemon, holds the path; remove it (the master "
                "binds the path within a second)")
    if fault is Fault.SOCKET_UNTRUSTED:
        return (f"CNI socket {conf.cni_daemon.bind_address}: its directory "
                "is not trusted (a path component is not a directory, not "
                "owned by root, or writable by group or others); restore it "
                "(root, 0700) and the master binds the socket again")
    if fault is Fault.IPAM_STORE:
        return (f"IPAM store in {conf.ipam.state_dir} is corrupt or "
                "unreadable; stop the daemon, move ipam.sqlite* aside (pods "
                "keep their interfaces; DEL and GC clean up) and start again")
    if fault is Fault.BRIDGE_KIND:
        return (f"[binding] bridge {conf.binding.bridge} exists and is not a "
                "bridge; rename that link or choose another bridge name")
    if fault is Fault.NET_ADMIN:
        return "netlink refused: the daemon lacks CAP_NET_ADMIN"
    if fault is Fault.DISK_FULL:
        return (f"[ipam] state_dir {conf.ipam.state_dir} is full or "
                "read-only; free space there")
    if fault is Fault.SUBNET_FULL:
        subnet = conf.controller.pod_subnet_id or (
            f"of network {conf.controller.pod_network_id}")
        return (f"pod subnet {subnet} has no free address "
                "(Neutron IpAddressGenerationFailure); pods wait for ports")
    if fault is Fault.SWEEP_UNPROVEN:
        return ("Neutron does not honour the tag filter: the port sweep is "
                "off (ports are still created)")
    if fault is Fault.PORT_LOST:
        return ("a pod's port vanished and Neutron refused to make it again "
                "with the same address and MAC (see the pod's Events)")
    if fault is Fault.NETWORK_MISSING:
        return (f"Neutron: the pod network {conf.controller.pod_network_id} "
                "does not exist (NetworkNotFound); pods wait for ports")
    if fault is Fault.SUBNET_MISSING:
        return (f"Neutron: the pod subnet {conf.controller.pod_subnet_id} "
                "does not exist (SubnetNotFound); pods wait for ports")
    if fault is Fault.NEUTRON_FORBIDS:
        return ("Neutron forbids the controller's port creates (403: its "
                "user's role); pods wait for ports")
    if fault is Fault.PODS_LAGGING:
        return ("the pod list lacked pods that exist (the API server's watch "
                "cache lags): their ports are kept until the pods arrive")
    return fault.name or str(int(fault))


class EnvironmentCheck(Check):
    name = "cni-environment"
    kind = Kind.READINESS

    def __init__(self, state: SharedState, conf: cfg.ConfigOpts) -> None:
        self.state = state
        self.conf = conf

    def run(self, now: float) -> Result:
        faults = self.state.faults()
        if not faults:
            return Result.passed()
        return Result.failed("; ".join(describe(f, self.conf)
                                       for f in Fault if f and f in faults))
