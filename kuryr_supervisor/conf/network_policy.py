"""[network_policy]: Kubernetes NetworkPolicy as Neutron security groups
whose rules name address groups (the controller's ``network_policy``
handler, doc/source/admin/network-policy.rst)."""
from __future__ import annotations

import uuid

from oslo_config import cfg

from kuryr_supervisor.conf.controller import needs

GROUP = "network_policy"
#: The handler's entry point name, in [controller] handlers.
HANDLER = "network_policy"

OPTS: list[cfg.Opt] = [
    cfg.ListOpt("default_security_groups", default=[],
                help="The security groups (ids) a pod's port goes back to "
                     "once no NetworkPolicy selects its pod any more: the "
                     "groups the port handler makes ports with. Empty: the "
                     "project's default group (found by its name, "
                     "default), as Neutron gives a port made without "
                     "groups."),
    cfg.FloatOpt("resync_interval", default=60.0, min=5.0, mutable=True,
                 help="Seconds between full looks at Neutron: the "
                      "cluster's security groups with their rules, its "
                      "address groups and the pods' ports listed again "
                      "(filtered by tags, not a call per policy), what "
                      "differs from the NetworkPolicies changed, what no "
                      "policy needs deleted. Between two, each change of a "
                      "NetworkPolicy, a pod or a namespace costs only the "
                      "writes it needs. After a Neutron outage or a "
                      "refusal, sooner (with backoff)."),
    cfg.FloatOpt("retry_max", default=30.0, min=1.0, mutable=True,
                 help="The longest wait, in seconds, before the handler "
                      "tries again what Neutron failed or refused (1 s "
                      "doubling up to this)."),
    cfg.IntOpt("ports_per_pass", default=200, min=1, max=10000,
               help="Pods' ports whose groups one pass changes at most "
                    "(one PUT each): the rest wait for the next pass, so "
                    "a policy that selects thousands of pods never holds "
                    "the handler's loop for long."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    """The default groups must be Neutron ids (UUIDs): checked as the
    files are loaded (a start with anything else exits 78, naming the
    option)."""
    if not needs(conf).handlers:
        return
    for group in conf.network_policy.default_security_groups:
        try:
            uuid.UUID(str(group))
        except ValueError:
            raise ValueError(
                "invalid value for [network_policy] "
                f"default_security_groups: {group!r} is not a security "
                "group id") from None
