"""The controller role's options: ``role`` (command line or [DEFAULT]),
``[controller]`` and ``[neutron]``, the way Kuryr registers them.

``[neutron]`` holds keystoneauth's session and auth options (``auth_type``,
``auth_section``, then the chosen plugin's own, e.g. ``auth_url``,
``username``, ``password``, ``project_name`` for ``password``), registered
with keystoneauth's loading helpers as Kuryr does, and the adapter options
that choose Neutron's endpoint (``region_name``, ``valid_interfaces``,
``endpoint_override``...) as Nova's ``[neutron]`` has them. keystoneauth1 is the
``openstack`` extra: without it the group is absent and the controller role
refuses to start with one line naming the extra.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from oslo_config import cfg

from kuryr_supervisor import version
from kuryr_supervisor.state import MAX_HANDLERS

GROUP = "controller"
NEUTRON_GROUP = "neutron"


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a role asks of the configuration. The options' checks run as
    the files are loaded (the start, ``check-config``, a reload), below the
    role objects that assemble the rest
    (:mod:`kuryr_supervisor.master.roles`): they read these flags, never
    the role's name."""

    #: Runs ``[controller] handlers``: needs the Kubernetes API,
    #: keystoneauth (``[neutron]``) and what each handler needs, and talks
    #: to Keystone and Neutron itself.
    handlers: bool
    #: Plumbs pods on its host: the OVS binding needs the pods' Neutron
    #: ports (``[cni_daemon] address_source = podport``).
    plumbs: bool


#: Each role's needs, by the value of ``role``.
NEEDS = {"cni": Needs(handlers=False, plumbs=True),
         "controller": Needs(handlers=True, plumbs=False)}
ROLES = tuple(NEEDS)


def needs(conf: cfg.ConfigOpts) -> Needs:
    """The configured role's needs (the CNI role's, the default, where
    ``role`` is not registered or not a role: :func:`validate` refuses
    that)."""
    role = getattr(conf, "role", "cni")
    return NEEDS.get(str(role), NEEDS["cni"])

ROLE_OPT = cfg.StrOpt(
    "role", default="cni",
    # Checked by validate(), not by argparse, so a bad value exits 78 with
    # one line like every other configuration error.
    help="Which set of workers the master runs: cni (the CNI node daemon: "
         "Watcher, Server, HealthManager) or controller (a process per handler "
         "and a HealthManager checking Kubernetes, Keystone and Neutron).")

OPTS = [
    cfg.ListOpt("handlers", default=["neutron_port"],
                help="Handlers to run, by entry point name in the group "
                     "kuryr_supervisor.controller.handlers; each runs in a "
                     "process of its own, named handler:<name> in the "
                     f"probes (at most {MAX_HANDLERS})."),
    cfg.IntOpt("handler_failures_count", default=5, min=1, mutable=True,
               help="Consecutive failed handler steps (not counting "
                    "Kubernetes, Keystone or Neutron outages, which make the "
                    "controller not ready instead) after which /alive "
                    "fails."),
    cfg.StrOpt("pod_network_id", default="",
               help="Neutron network the pods' ports are created on."),
    cfg.StrOpt("pod_subnet_id", default="",
               help="Neutron subnet of the pods' addresses (empty: the "
                    "network's first subnet)."),
    cfg.StrOpt("cluster_id", default="",
                help="This cluster's id, put in the Neutron tag "
                     "kuryr-supervisor:<cluster_id> of every port the "
                     "controller creates, and at the head of its name "
                     "(kuryr-supervisor:<cluster_id>:<namespace>/<pod>); "
                     "only ports with that tag, on pod_network_id, in the "
                     "project, are ever adopted or swept (a port whose tag "
                     "call was lost is known by its name, tagged, then "
                     "adopted), so clusters sharing a project never touch "
                     "each other's ports. Empty (default): the UID of the "
                     "kube-system namespace, read at start (stable for the "
                     "cluster's life). Letters, digits, '.', '_', '-', at "
                     "most 64."),
    cfg.StrOpt("project_id", default="",
               help="Project whose port quota readiness checks (empty: the "
                    "token's project)."),
    cfg.FloatOpt("resync_interval", default=60.0, min=1.0, mutable=True,
                 help="Seconds between full reconciliations of pods and "
                      "ports (leaked ports of gone pods are deleted)."),
    cfg.FloatOpt("token_renew_margin", default=120.0, min=1.0,
                 help="A Keystone token is renewed when it expires within "
                      "this many seconds, but never more than half the "
                      "token's lifetime before (a shorter-lived token is "
                      "renewed at half its life, with one warning), so a "
                      "token lifetime below this margin never makes the "
                      "controller log in on every call. A refused login is "
                      "retried with exponential backoff (1 s doubling to "
                      "60 s, jittered), never at the rate of the calls, so "
                      "a wrong password cannot trip an account lockout."),
    cfg.FloatOpt("openstack_check_interval", default=10.0, min=0.1,
                 mutable=True,
                 help="Seconds between readiness checks of Keystone and "
                      "Neutron (probes reuse the last answer)."),
    cfg.FloatOpt("openstack_timeout", default=5.0, min=0.1,
                 help="Timeout in seconds of every Keystone (token, version "
                      "discovery) and Neutron request; [neutron] timeout "
                      "instead when it is set and shorter (the request "
                      "timeout). A port create, the pods' and the pools' "
                      "alike, gets the request timeout plus "
                      "port_create_timeout_per_port a port (at most "
                      "port_create_timeout_max). A whole call, discovery and "
                      "token included, is bounded by three request timeouts "
                      "while the worker keeps heartbeating; each readiness "
                      "check of Keystone and Neutron by one, and never by "
                      "more than a quarter of [supervisor] health_deadline. "
                      "A timeout or an answer that is not JSON makes the "
                      "controller not ready, naming it; it is never a "
                      "handler failure."),
    cfg.BoolOpt("openstack_checks", default=False,
                help="CNI role: check Keystone and Neutron in readiness too "
                     "(nested deployments); the controller role always "
                     "does."),
    cfg.BoolOpt("leader_election", default=False,
                help="Act only while holding the Lease (coordination.k8s.io"
                     "/v1); needed when more than one replica runs."),
    cfg.StrOpt("lease_name", default="kuryr-supervisor-controller",
               help="Name of the Lease used for leader election. Where "
                    "Neutron's policy keeps the controller from choosing "
                    "MAC addresses (creates not idempotent), the leader "
                    "announces its port creates in a second Lease, this "
                    "name with '-creates' appended, which a new leader "
                    "waits out; RBAC must allow both."),
    cfg.StrOpt("lease_namespace", default="kube-system",
               help="Namespace of the Lease."),
    cfg.IntOpt("lease_duration", default=15, min=2,
               help="Seconds a leader's Lease is valid without renewal: a "
                    "standby takes it over this long after it last saw "
                    "the Lease change, by its own clock (as client-go), so "
                    "a skew between the replicas' clocks neither hands a "
                    "live Lease over nor delays a handover."),
]


#: How ports are created: sizes, requests in flight, timeouts.
PORT_OPTS = [
    cfg.IntOpt("port_create_requests", default=3, min=1, max=16,
               help="Port create requests sent to Neutron at once. A "
                    "deployed Neutron's throughput, not its batching, is "
                    "the limit: a few in flight keep it busy without "
                    "making each request slower than its timeout."),
    cfg.FloatOpt("port_batch_seconds", default=2.0, min=0.1,
                 help="How long one port create request should take: its "
                      "size is this divided by Neutron's measured time per "
                      "port (a moving average), between 1 and 100 ports. "
                      "Smaller: the first pods of a burst get their ports "
                      "sooner; larger: fewer requests."),
    cfg.FloatOpt("port_create_timeout_per_port", default=0.5, min=0.0,
                 help="Seconds a port create request may take per port, "
                      "on top of the request timeout (openstack_timeout; "
                      "[neutron] timeout when shorter), three times the "
                      "measured time per port when that is more. A create "
                      "whose answer times out may still commit: with MAC "
                      "addresses derived from the pods' UIDs (where Neutron "
                      "lets the controller choose them) it is sent again "
                      "at the next try and Neutron refuses the second; "
                      "elsewhere its pods wait three of its timeouts before "
                      "a port is asked for them again."),
    cfg.FloatOpt("port_create_timeout_max", default=120.0, min=1.0,
                 help="Longest timeout of one port create request "
                      "(seconds)."),
    cfg.FloatOpt("port_status_interval", default=1.0, min=0.0, mutable=True,
                 help="Seconds between asking Neutron, by id, for the "
                      "status of ports made in the last two minutes that "
                      "are not ACTIVE yet (at most 20 a round), so their "
                      "PodPort says ACTIVE (or BINDING_FAILED) soon after "
                      "Neutron does: what a node that waits for the port's "
                      "status (an ML2/OVS agent's, [binding] "
                      "ovs_port_ready = port-status) needs for its ADD to "
                      "return. 0: statuses are written at each resync "
                      "only (enough where no node waits for them: the "
                      "Linux bridge binding, OVN nodes that wait for "
                      "ovn-installed). A status is written only when it "
                      "differs from what the PodPort says (nothing said is "
                      "DOWN)."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_cli_opt(ROLE_OPT)
    conf.register_opts(OPTS, group=GROUP)
    conf.register_opts(PORT_OPTS, group=GROUP)


def uses_openstack(conf: cfg.ConfigOpts) -> bool:
    """Whether this daemon talks to Keystone and Neutron at all."""
    return needs(conf).handlers or bool(conf.controller.openstack_checks)


def register_late(conf: cfg.ConfigOpts) -> None:
    """Register ``[neutron]`` once the files are parsed, and only where the
    daemon uses OpenStack: keystoneauth1 (with requests) is some 5 MiB of
    heap that every worker of a CNI daemon would otherwise carry, shared or
    not. oslo.config reads a group registered after parsing from the same
    files."""
    if uses_openstack(conf):
        register_neutron(conf)


def register_neutron(conf: cfg.ConfigOpts) -> None:
    """``[neutron]``'s keystoneauth options, once; nothing without the
    openstack extra. The OpenStack adapter calls it too, for a ``conf``
    that was never validated."""
    if NEUTRON_GROUP in conf:
        return
    try:
        from keystoneauth1 import loading as ks_loading
    except ImportError:      # the openstack extra is not installed
        return
    ks_loading.register_session_conf_options(conf, NEUTRON_GROUP)
    ks_loading.register_auth_conf_options(conf, NEUTRON_GROUP)
    conf.register_opts(_endpoint_opts(ks_loading), group=NEUTRON_GROUP)


def auth_plugin_opts(conf: cfg.ConfigOpts) -> dict[str, list[cfg.Opt]]:
    """{group: options} of the keystoneauth plugin ``auth_type`` names, in
    the group keystoneauth reads them from (``auth_section``'s, else
    ``[neutron]``). keystoneauth registers them only when it loads the
    plugin, in the handler's process; the checks of the files (unknown
    options) need them before. Empty where ``[neutron]`` is not registered
    (keystoneauth1 is never imported for that), no plugin is named, or the
    named one is not installed (the login says so)."""
    if NEUTRON_GROUP not in conf:
        return {}
    from keystoneauth1 import exceptions as ks_exc
    from keystoneauth1 import loading as ks_loading
    try:
        group = conf[NEUTRON_GROUP].auth_section or NEUTRON_GROUP
        name = conf[group].auth_type
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError, KeyError):
        return {}
    if not name:
        return {}
    try:
        return {group: ks_loading.get_auth_plugin_conf_options(name)}
    except (ks_exc.NoMatchingPlugin, RuntimeError):
        return {}


#: keystoneauth's adapter options the controller honours: which Neutron
#: endpoint of the catalog (or none: an override). Its retry options are
#: left out on purpose: a port create retried by the transport could commit
#: twice (the controller decides itself what is safe to send again).
ENDPOINT_OPTS = ("service-type", "service-name", "valid-interfaces",
                 "region-name", "endpoint-override")
#: What ``valid_interfaces`` may name.
INTERFACES = ("public", "internal", "admin")


def _endpoint_opts(ks_loading: Any) -> list[cfg.Opt]:
    opts = [o for o in ks_loading.get_adapter_conf_options(
        include_deprecated=False) if o.name in ENDPOINT_OPTS]
    for opt in opts:
        if opt.name == "service-type":
            opt.default = "network"
    return opts


def list_opts(conf: cfg.ConfigOpts | None = None
              ) -> list[tuple[str, list[cfg.Opt]]]:
    """The groups' options (``role`` is a command-line option, checked by
    :func:`validate`); given ``conf``, only the groups registered there."""
    opts: list[tuple[str, list[cfg.Opt]]] = [(GROUP, OPTS + PORT_OPTS)]
    if conf is not None and NEUTRON_GROUP not in conf:
        return opts
    try:
        from keystoneauth1 import loading as ks_loading
    except ImportError:
        return opts
    opts.append((NEUTRON_GROUP, ks_loading.get_session_conf_options()
                 + ks_loading.get_auth_common_conf_options()
                 + _endpoint_opts(ks_loading)))
    return opts


def _kubernetes_configured(conf: cfg.ConfigOpts) -> bool:
    k = conf.kubernetes
    return bool(k.api_root or k.kubeconfig
                or os.environ.get("KUBERNETES_SERVICE_HOST"))


def validate(conf: cfg.ConfigOpts) -> None:
    role = conf.role
    if role not in ROLES:
        raise ValueError(f"invalid value for role: {role!r} (choose one of "
                         f"{', '.join(ROLES)})")
    source = conf.cni_daemon.address_source
    if source in ("podport", "annotation") and not _kubernetes_configured(conf):
        raise ValueError(f"invalid value for [cni_daemon] address_source: "
                         f"{source} needs the Kubernetes API")
    if conf.controller.cluster_id and \
            not _CLUSTER_ID.fullmatch(conf.controller.cluster_id):
        raise ValueError(f"invalid value for [controller] cluster_id: "
                         f"{conf.controller.cluster_id!r} (letters, digits, "
                         f"'.', '_', '-', at most 64)")
    if NEUTRON_GROUP in conf:       # the CNI role's OpenStack checks too
        _validate_endpoint(conf[NEUTRON_GROUP])
    if not needs(conf).handlers:
        return
    if not _kubernetes_configured(conf):
        raise ValueError("role controller needs the Kubernetes API "
                         "([kubernetes] api_root or kubeconfig, or a pod's "
                         "service account)")
    if NEUTRON_GROUP not in conf:
        raise ValueError("role controller needs keystoneauth1: "
                         f"{version.install_hint('openstack')}")
    _validate_handlers(list(conf.controller.handlers))
    for handler in ("neutron_port", "network_canary"):
        if handler in conf.controller.handlers and \
                not conf.controller.pod_network_id:
            raise ValueError("invalid value for [controller] pod_network_id: "
                             f"required by the {handler} handler")


_CLUSTER_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_URL = re.compile(r"https?://[^\s/?#]+(/[^\s]*)?")


def _validate_endpoint(group: Any) -> None:
    """Which Neutron endpoint: an override must be an http(s) URL, the
    interfaces the catalog's."""
    if group.endpoint_override and not _URL.fullmatch(group.endpoint_override):
        raise ValueError(f"invalid value for [neutron] endpoint_override: "
                         f"{group.endpoint_override!r} (an http:// or "
                         f"https:// URL)")
    bad = [i for i in group.valid_interfaces or () if i not in INTERFACES]
    if bad:
        raise ValueError(f"invalid value for [neutron] valid_interfaces: "
                         f"{', '.join(bad)} (choose from "
                         f"{', '.join(INTERFACES)})")
    if not group.service_type:
        raise ValueError("invalid value for [neutron] service_type: empty")

#: A handler's name becomes a check name, a URL path and a metric label.
_HANDLER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _validate_handlers(names: list[str]) -> None:
    """One process and one shared-memory slot per handler: the slots are
    reserved before forking, so the list is bounded and names are unique."""
    if not names:
        raise ValueError("invalid value for [controller] handlers: at least "
                         "one handler is needed")
    if len(names) > MAX_HANDLERS:
        raise ValueError(f"invalid value for [controller] handlers: "
                         f"{len(names)} handlers, at most {MAX_HANDLERS}")
    for name in names:
        if not _HANDLER_NAME.fullmatch(name):
            raise ValueError(f"invalid value for [controller] handlers: "
                             f"{name!r} (letters, digits, '_', '.', '-')")
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(f"invalid value for [controller] handlers: "
                         f"{', '.join(doubled)} named twice")
