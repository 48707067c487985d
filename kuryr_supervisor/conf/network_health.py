"""[network_health]: the node's NodeNetwork record and its canary, and the
controller's network judge (the ``network_health`` handler) and canary
ports (the ``network_canary`` handler)."""
from __future__ import annotations

import re

from oslo_config import cfg

GROUP = "network_health"
#: A condition type: a qualified name, as Kubernetes validates it.
_TYPE = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}"
                   r"[A-Za-z0-9])?$")
#: Types that belong to Kubernetes itself (NetworkUnavailable is written
#: beside ours, never as ours).
_RESERVED = {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure",
             "NetworkUnavailable"}

NODE_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt("record", default=True,
                help="CNI role in Kubernetes mode: write this node's "
                     "NodeNetwork record (what the node says of its data "
                     "plane: local checks, gateway, peers, canary, daemon "
                     "readiness) for the controller's network judge, on "
                     "every change and every record_heartbeat seconds. "
                     "Needs the NodeNetwork resource (shipped with the "
                     "controller) and its RBAC; without the resource the "
                     "writer says so once and tries again every 5 "
                     "minutes."),
    cfg.IntOpt("record_heartbeat", default=60, min=10, max=3600,
               help="Seconds between writes of an unchanged record: at "
                    "steady state one API write per node per this many "
                    "seconds. The judge calls a record stale once it has "
                    "not been written for this plus stale_grace."),
    cfg.FloatOpt("status_hold", default=5.0, min=0.0, max=60.0,
                 mutable=True,
                 help="CNI role with the record, where the controller's "
                      "network judge judges the node: seconds CNI STATUS "
                      "keeps answering success once a check fails for a "
                      "cause every node typically meets at once "
                      "(ovn-controller off the Southbound database), "
                      "waiting for the judge's verdict. While the judge "
                      "has declared a cluster-wide fault of the check's "
                      "kind, STATUS does not fail for it at all (a "
                      "runtime on libcni 1.2 would turn the failure into "
                      "every Node's Ready=False); past the hold without "
                      "one, STATUS fails. ADDs fail and readiness names "
                      "the cause either way. 0: no hold."),
    cfg.FloatOpt("record_min_interval", default=2.0, min=0.1, max=60.0,
                 mutable=True,
                 help="Seconds between two writes of the record at least: "
                      "changes that come faster are folded into one write, "
                      "so a flapping check cannot storm the API."),
]

CANARY_NODE_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt("canary", default=True,
                help="CNI role with the OVS binding, in Kubernetes mode: "
                     "plug the canary port the controller's network_canary "
                     "handler made for this node (in the node's record) "
                     "into a network namespace of the daemon's own, and "
                     "probe the gateway and the peers it names from it. "
                     "Nothing happens until the record names a port."),
    cfg.PortOpt("canary_tcp_port", default=8094,
                help="TCP port the canary answers on inside its own "
                     "namespace (a peer's probe connects, sends a nonce "
                     "and reads it back), and the port it probes its "
                     "peers' canaries on: the same on every node. The "
                     "pods' security groups must let the pod network "
                     "reach it (the default group does). The controller's "
                     "value is the canary Service's port and target port "
                     "(with the services handler): the same as the "
                     "nodes'."),
    cfg.FloatOpt("probe_timeout", default=1.0, min=0.05, max=10.0,
                 mutable=True,
                 help="Seconds one probe (an ICMP echo, a TCP exchange) "
                      "may take before it counts as not reached."),
]

CANARY_CONTROLLER_OPTS: list[cfg.Opt] = [
    cfg.IntOpt("canary_peers", default=3, min=1, max=64, mutable=True,
               help="The network_canary handler: how many other nodes' "
                    "canaries each node probes (a ring in name order: "
                    "every node is probed by as many). The judge blames "
                    "a canary nobody reaches only with two witnesses or "
                    "more, so keep it at 2 or more."),
    cfg.FloatOpt("probe_interval", default=2.0, min=1.0, max=3600.0,
                 mutable=True,
                 help="Seconds between two rounds of a node's probes (its "
                      "gateway and its peers) in a small cluster; it grows "
                      "with the node count so that the cluster's probes "
                      "stay within probe_rate per second."),
    cfg.FloatOpt("probe_rate", default=100.0, min=1.0, mutable=True,
                 help="Probes per second the whole cluster's canaries send "
                      "at most (a round is one to the gateway and one to "
                      "each of canary_peers peers per node)."),
    cfg.FloatOpt("canary_resync_interval", default=60.0, min=1.0,
                 mutable=True,
                 help="Seconds between two lists of the canary ports in "
                      "Neutron (one per node with a record: made when "
                      "missing, deleted with their node). A record that "
                      "appears, or a canary that goes down, brings the "
                      "next list forward."),
]

JUDGE_OPTS: list[cfg.Opt] = [
    cfg.StrOpt("condition_type", default="KuryrNetworkHealthy",
               help="The judge's own Node condition: True while the node's "
                    "network is fine, False (reason: the cause) during a "
                    "local fault. NetworkUnavailable is set beside it."),
    cfg.FloatOpt("daemon_grace", default=30.0, min=0.0, mutable=True,
                 help="Seconds a node's daemon may say not ready before "
                      "that is a local fault (a restart or an upgrade "
                      "takes less)."),
    cfg.FloatOpt("stale_grace", default=30.0, min=0.0, mutable=True,
                 help="Seconds past a record's own heartbeat after which "
                      "a record not written again is stale: its daemon is "
                      "gone or cannot reach the API (a local fault)."),
    cfg.FloatOpt("fault_after", default=5.0, min=0.0, mutable=True,
                 help="Seconds a data-plane symptom (a failing local "
                      "check, the gateway or the peers unreachable) must "
                      "last before the node is in a local fault. Keep it "
                      "above two probe rounds (probe_interval plus "
                      "probe_timeout, twice), so a round or two lost under "
                      "load marks no node."),
    cfg.FloatOpt("recover_after", default=30.0, min=0.0, mutable=True,
                 help="Seconds a node in a local fault must stay without "
                      "a symptom before it is healthy again."),
    cfg.IntOpt("flap_count", default=3, min=1, mutable=True,
               help="A node that turned faulty this many times within "
                    "flap_window recovers only after flap_hold."),
    cfg.FloatOpt("flap_window", default=600.0, min=1.0, mutable=True,
                 help="Seconds over which flap_count is counted."),
    cfg.FloatOpt("flap_hold", default=300.0, min=0.0, mutable=True,
                 help="Seconds a flapping node must stay without a symptom "
                      "before it is healthy again."),
    cfg.FloatOpt("cluster_fraction", default=0.5, min=0.1, max=0.9,
                 mutable=True,
                 help="When more than this share of the judged nodes are "
                      "in trouble at once, the fault is the cloud's "
                      "(cluster-wide): no Node condition changes, a "
                      "Warning Event and a metric name it."),
    cfg.FloatOpt("cluster_settle", default=60.0, min=0.0, mutable=True,
                 help="Seconds trouble must stay at or below "
                      "cluster_fraction before a cluster-wide fault is "
                      "over."),
    cfg.FloatOpt("correlation", default=60.0, min=0.0, mutable=True,
                 help="Local faults that began at most this many seconds "
                      "before a cluster-wide fault are withdrawn: they "
                      "were its first signs."),
    cfg.FloatOpt("judge_interval", default=1.0, min=0.1, max=60.0,
                 mutable=True,
                 help="Seconds between two judgements when no record "
                      "changes (a changed record is judged at once)."),
    cfg.IntOpt("verdict_lifetime", default=60, min=10, max=600,
               mutable=True,
               help="Seconds a verdict the judge writes into a node's "
                    "record (a cluster-wide fault, which spares the "
                    "node's CNI STATUS; the node's own fault, which fails "
                    "its readiness and STATUS) stands without renewal. "
                    "The judge renews each every half this while it "
                    "lasts; with the controller gone, the nodes judge "
                    "alone again this long after the last renewal at "
                    "most. During a cluster-wide fault that is one write "
                    "per node every half this."),
    cfg.FloatOpt("resync_interval", default=300.0, min=5.0, mutable=True,
                 help="Seconds between lists of every Node, to set again "
                      "what someone else changed of our conditions and to "
                      "release them on nodes no longer judged."),
    cfg.BoolOpt("release_on_stop", default=False,
                help="On a graceful stop, the leader releases every "
                     "condition it set (our own type removed, a "
                     "NetworkUnavailable of ours turned False). For "
                     "uninstalling, never for upgrades. The CNI role: on "
                     "a graceful stop with [cni_install] uninstall_on_stop "
                     "the node deletes its own record and releases its own "
                     "Node's conditions the same way."),
]


ALL_OPTS = NODE_OPTS + CANARY_NODE_OPTS + JUDGE_OPTS + CANARY_CONTROLLER_OPTS


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(ALL_OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, ALL_OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    opts = conf[GROUP]
    kind = opts.condition_type
    if not _TYPE.match(kind) or kind in _RESERVED:
        raise ValueError(f"[{GROUP}] condition_type {kind!r} is not a "
                         "condition type of our own (a qualified name, not "
                         f"one of {', '.join(sorted(_RESERVED))})")
    if opts.flap_hold < opts.recover_after:
        raise ValueError(f"[{GROUP}] flap_hold ({opts.flap_hold:g}s) must "
                         f"not be shorter than recover_after "
                         f"({opts.recover_after:g}s)")
