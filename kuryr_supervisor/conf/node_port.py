"""[node_port]: the node's own port into the pod network (the OVS
binding), made by the controller's ``network_canary`` handler and plugged
by the node, so the node (its kubelet's probes) reaches its pods and they
reach it."""
from __future__ import annotations

import ipaddress
import re

from oslo_config import cfg

GROUP = "node_port"
# An OVS port and a Linux interface name at once: what ovs-vsctl and the
# kernel both take (1-15 letters, digits, '_', '.' or '-').
_IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,14}$")

OPTS: list[cfg.Opt] = [
    cfg.BoolOpt("enabled", default=True,
                help="Controller role (its network_canary handler): make "
                     "a Neutron port per node that plugs a canary (the "
                     "OVS binding's nodes), bound to it, in a security "
                     "group of the controller's own that the pods' "
                     "group (the project's default) admits, and name it "
                     "in the node's NodeNetwork record. CNI role with "
                     "[binding] driver = ovs in Kubernetes mode (with "
                     "[network_health] record): plug that port as an OVS "
                     "internal port on the integration bridge in the "
                     "node's own network namespace, with its address and "
                     "routes, so the node reaches its pods (the kubelet's "
                     "probes) and they reach it. The Linux bridge "
                     "binding makes nothing (the node reaches its pods "
                     "through the bridge)."),
    cfg.StrOpt("ifname", default="kuryr-node0",
               help="CNI role: the name of the node port's OVS internal "
                    "port and of its interface in the node's namespace "
                    "(1-15 letters, digits, '_', '.' or '-')."),
    cfg.StrOpt("service_cidr", default="",
               help="CNI role: the cluster's service range (an IPv4 "
                    "CIDR, the API server's --service-cluster-ip-range), "
                    "routed from the node through the node port via the "
                    "pod subnet's gateway, so OVN's load balancers "
                    "(Services as Octavia's OVN provider makes them) "
                    "apply to the node's own connections. Empty (the "
                    "default): the range of the service subnet the "
                    "controller names in the node's record, where it "
                    "runs the services handler; none otherwise (the pod "
                    "subnet's route only)."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def service_cidr(value: str) -> ipaddress.IPv4Network | None:
    """``[node_port] service_cidr`` read (None: empty); ValueError says
    why it is not a service range."""
    if not value:
        return None
    try:
        net = ipaddress.IPv4Network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"[node_port] service_cidr {value!r} is not an "
                         f"IPv4 network: {exc}") from exc
    if net.prefixlen == 0 or net.is_loopback or net.is_multicast or \
            net.is_link_local:
        raise ValueError(f"[node_port] service_cidr {value!r} is not a "
                         "service range (not the default route, loopback, "
                         "link-local or multicast)")
    return net


def validate(conf: cfg.ConfigOpts) -> None:
    group = conf[GROUP]
    if not _IFNAME.match(group.ifname) or group.ifname in (".", ".."):
        raise ValueError(f"[node_port] ifname {group.ifname!r} is not a "
                         "valid interface name (1-15 letters, digits, "
                         "'_', '.' or '-', not starting with '-' or '.')")
    if group.ifname.startswith("ksv"):
        raise ValueError(f"[node_port] ifname {group.ifname!r} starts like "
                         "a pod's host end (ksv...), which GC removes")
    service_cidr(group.service_cidr)
