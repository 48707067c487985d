"""[cni_daemon] (Kuryr's names where they exist): the CNI API of the Server."""
from __future__ import annotations

from oslo_config import cfg

GROUP = "cni_daemon"

OPTS = [
    cfg.IntOpt("cni_failures_count", default=3, min=1, mutable=True,
               help="Consecutive internal CNI ADD failures after which "
                    "/alive fails. Malformed requests, vanished pods and "
                    "client timeouts never count; a successful ADD resets "
                    "the count."),
    cfg.StrOpt("bind_address", default="unix:///run/kuryr-supervisor/cni.sock",
               help="Where the CNI API listens: unix:///path (default; the "
                    "socket is 0600 in a 0700 directory, so only root can "
                    "use it) or host:port over TCP, e.g. Kuryr's "
                    "127.0.0.1:5036 (any local user can then connect). The "
                    "shim finds it in the netconf key daemon_socket."),
    cfg.IntOpt("max_concurrency", default=64, min=1, max=4096,
               help="CNI requests served at once; further connections wait "
                    "in the listen backlog. Threads: the work is syscalls "
                    "that release the GIL."),
    cfg.IntOpt("max_request_bytes", default=1 << 20, min=1024, mutable=True,
               help="Largest CNI request body accepted; a larger one is "
                    "refused with CNI code 6 (HTTP 413) before it is read."),
    cfg.FloatOpt("request_timeout", default=60.0, min=1.0,
                 help="Seconds a request may wait for its container's lock "
                      "(another operation on the same container) before "
                      "failing with code 11, and the socket read/write "
                      "timeout of a client connection."),
    cfg.StrOpt("address_source", default="ipam", choices=[
        ("ipam", "the embedded host-local IPAM"),
        ("podport", "the address, MAC and gateway of the pod's Neutron "
                    "port, from the PodPort custom resource "
                    "(podports.kuryr-supervisor.openstack.org) that only "
                    "the controller role may write (Kubernetes mode only)"),
        ("annotation", "deprecated alias of podport: the pod annotation "
                       "is never read, since the pod's owner can write it")],
        help="Where a pod's address comes from on CNI ADD. Whatever the "
             "source, the address is checked against this node's "
             "configuration ([ipam] subnet and gateway) before anything is "
             "bound: refused (CNI code 7, or 4 for another pod's port) when "
             "it is outside the subnet, has another prefix, is the "
             "network, broadcast or gateway address, or the MAC is not a "
             "non-zero unicast MAC."),
    cfg.FloatOpt("annotation_timeout", default=30.0, min=0.1, mutable=True,
                 help="With address_source = podport: seconds ADD waits "
                      "for the controller's PodPort before failing with "
                      "code 11 (try again later)."),
    cfg.BoolOpt("wait_for_active_port", default=None, mutable=True,
                sample_default="<auto>",
                help="With address_source = podport: ADD also waits, "
                     "within annotation_timeout, until the PodPort says "
                     "the Neutron port is ACTIVE (as Kuryr's CNI waits for "
                     "an active VIF). Unset (auto): on with [binding] "
                     "driver = ovs (the node's OVN controller or OVS agent "
                     "binds the port), off with the Linux bridge binding "
                     "(no Neutron agent ever makes its ports ACTIVE). A "
                     "port still not ACTIVE when the time is up, or one "
                     "Neutron failed to bind (BINDING_FAILED, at once), "
                     "gets CNI code 11 naming it, never counted against "
                     "the node's ADD failure budget."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def wait_for_active(conf: cfg.ConfigOpts) -> bool:
    """``wait_for_active_port`` as it applies: unset means on with the OVS
    binding, off with the Linux bridge one (read on every ADD: mutable)."""
    value = conf[GROUP].wait_for_active_port
    if value is None:
        return bool(conf.binding.driver == "ovs")
    return bool(value)
