"""[binding]: how a pod's interface is plugged (a Linux bridge or Open
vSwitch's integration bridge), its MTU, and the OVSDB connection."""
from __future__ import annotations

import re

from oslo_config import cfg

from kuryr_supervisor.conf import controller

GROUP = "binding"
# What the kernel accepts as an interface name (dev_valid_name), minus ':'
# which the ip tool treats as an alias separator and '%' (a name template).
_IFNAME = re.compile(r"^[^\s/:%]{1,15}$")

# What ovs-vsctl is given: no option-like or quoted names, no spaces.
_OVS_BRIDGE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,14}$")
_CONNECTION = re.compile(r"^(unix:/[^\s,]+|tcp:[0-9A-Za-z.\-\[\]:]+:\d{1,5})$")

OPTS: list[cfg.Opt] = [
    cfg.StrOpt("driver", default="bridge", choices=[
        ("bridge", "a node-local Linux bridge ([binding] bridge) holding "
                   "the gateway address; no Neutron agent sees the pods"),
        ("ovs", "Open vSwitch's integration bridge ([binding] ovs_bridge): "
                "the pod's host end is a port whose Interface carries "
                "external_ids:iface-id=<Neutron port id>, so the node's "
                "OVN controller or OVS agent binds the Neutron port. Needs "
                "[cni_daemon] address_source = podport (Kubernetes mode)")],
               help="How a pod's veth is plugged on the host."),
    cfg.StrOpt("bridge", default="kuryr0",
               help="Linux bridge the pods' host veth ends are attached to; "
                    "it holds the [ipam] gateway address. Created if "
                    "missing."),
    cfg.IntOpt("mtu", default=1500, min=68, max=65535,
               help="MTU of both ends of every pod veth. Set it to the "
                    "node's uplink MTU minus any encapsulation overhead "
                    "(with driver = ovs: the Neutron network's MTU)."),
    cfg.StrOpt("ovs_bridge", default="br-int",
               help="With driver = ovs: the integration bridge the pods' "
                    "host veth ends are added to. Never created by the "
                    "daemon: OVN's controller or the OVS agent owns it."),
    cfg.StrOpt("ovsdb_connection", default="unix:/run/openvswitch/db.sock",
               help="With driver = ovs: the local ovsdb-server, "
                    "unix:<absolute path> or tcp:<host>:<port>."),
    cfg.FloatOpt("ovsdb_timeout", default=5.0, min=1.0, max=120.0,
                 help="With driver = ovs: seconds (whole seconds, rounded) "
                      "any one OVSDB call may take; a call that takes "
                      "longer fails the CNI "
                      "request with code 11 (not counted against the ADD "
                      "failure budget) and the readiness check ovsdb."),
    cfg.StrOpt("ovs_port_ready", default="auto", mutable=True, choices=[
        ("auto", "ovn-installed on an OVN chassis (Open_vSwitch "
                 "external_ids:ovn-remote set) whose ovn-controller is "
                 "20.06 or later (or does not say its version), "
                 "port-status anywhere else (an OVS agent's node); "
                 "judged once per Server process and logged"),
        ("ovn-installed", "ADD returns once ovn-controller set "
                          "external_ids:ovn-installed=true on the pod's "
                          "Interface (its flows are installed), seen "
                          "through the node's OVSDB connection"),
        ("port-status", "ADD returns once the pod's PodPort says the "
                        "Neutron port is ACTIVE ([cni_daemon] "
                        "wait_for_active_port; the controller copies it "
                        "from Neutron)")],
               help="With driver = ovs: when ADD may return, i.e. what "
                    "proves the pod's port is wired. Either wait is "
                    "bounded by [cni_daemon] annotation_timeout; a port "
                    "not ready in time gets CNI code 11 naming what is "
                    "missing (on OVN: ovn-controller not running or not "
                    "connected, no chassis, the port not claimed by this "
                    "chassis), never counted, and the pod's interface is "
                    "removed."),
    cfg.StrOpt("ovn_rundir", default="/run/ovn",
               help="With driver = ovs on an OVN node: the directory of "
                    "ovn-controller's pidfile and control socket, asked "
                    "(read-only) for its version, its Southbound "
                    "connection and the ports it claimed, to say why a "
                    "port is not installed."),
    cfg.StrOpt("ovs_tx_checksum_off", default="auto",
               choices=[("auto", "off when the integration bridge's "
                                 "datapath_type is netdev (userspace)"),
                        ("true", "always switch it off"),
                        ("false", "never touch it")],
               help="With driver = ovs: switch transmit checksum offload "
                    "off on the pod's interface. OVS's userspace datapath "
                    "never completes a partial checksum, so without this "
                    "TCP between pods fails (ICMP works)."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    group = conf[GROUP]
    bridge = group.bridge
    if not _IFNAME.match(bridge) or bridge in (".", ".."):
        raise ValueError(f"[binding] bridge {bridge!r} is not a valid "
                         "interface name (1-15 characters, no space, '/' "
                         "or ':')")
    if group.driver != "ovs":
        return
    if not _OVS_BRIDGE.match(group.ovs_bridge) or group.ovs_bridge in (
            ".", ".."):
        raise ValueError(f"[binding] ovs_bridge {group.ovs_bridge!r} is not "
                         "a valid bridge name (1-15 letters, digits, "
                         "'_', '.' or '-', not starting with '-' or '.')")
    if not group.ovn_rundir.startswith("/"):
        raise ValueError(f"[binding] ovn_rundir {group.ovn_rundir!r} is not "
                         "an absolute path")
    if not _CONNECTION.match(group.ovsdb_connection):
        raise ValueError(f"[binding] ovsdb_connection "
                         f"{group.ovsdb_connection!r} is not "
                         "unix:<absolute path> or tcp:<host>:<port>")
    source = getattr(conf.cni_daemon, "address_source", "podport")
    if controller.needs(conf).plumbs and \
            source not in ("podport", "annotation"):
        raise ValueError("[binding] driver = ovs needs [cni_daemon] "
                         "address_source = podport: the OVS port's iface-id "
                         "is the pod's Neutron port")
