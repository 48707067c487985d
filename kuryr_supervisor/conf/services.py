"""[services]: Kubernetes Services as Octavia load balancers (the
controller's ``services`` handler, doc/source/admin/services.rst)."""
from __future__ import annotations

from oslo_config import cfg

from kuryr_supervisor.conf.controller import needs

GROUP = "services"
#: The handler's entry point name, in [controller] handlers.
HANDLER = "services"

OPTS: list[cfg.Opt] = [
    cfg.StrOpt("service_subnet_id", default="",
               help="The Neutron subnet whose CIDR is the cluster's service "
                    "CIDR (the API server's --service-cluster-ip-range, as "
                    "Kuryr's [neutron_defaults] service_subnet): each "
                    "Service's load balancer has its clusterIP as VIP on "
                    "it. Its network must be attached to a Neutron router "
                    "that also joins the pod subnet (the VIP port is never "
                    "bound; the router answers ARP for it). Required when "
                    "the services handler is in [controller] handlers."),
    cfg.StrOpt("provider", default="ovn",
               help="The Octavia provider of the load balancers. Only ovn "
                    "is supported (no amphora VMs: OVN load balancers, "
                    "ACTIVE within about a second); empty: Octavia's "
                    "default provider."),
    cfg.BoolOpt("sctp", default=False,
                help="Make listeners for a Service's SCTP ports too (where "
                     "the provider and OVN take SCTP); else an SCTP port is "
                     "left out and said in an Event on the Service."),
    cfg.IntOpt("octavia_requests", default=3, min=1, max=16,
               help="Services whose load balancer is being changed at "
                    "once, each one write at a time (a write, then its "
                    "load balancer polled until settled). The OVN provider "
                    "serialises the writes of each Octavia API worker: a "
                    "few in flight keep it busy, more only queue."),
    cfg.FloatOpt("resync_interval", default=60.0, min=5.0, mutable=True,
                 help="Seconds between full reconciliations: the cluster's "
                      "load balancers, listeners and pools listed again "
                      "(three lists filtered by tags, not a call per "
                      "Service), each compared with its Service, what "
                      "differs changed, what has no Service any more "
                      "deleted. After an Octavia outage or a refused "
                      "write, sooner (with backoff)."),
    cfg.FloatOpt("settle_timeout", default=60.0, min=1.0, mutable=True,
                 help="Seconds a load balancer may stay pending after a "
                      "write (the OVN provider needs about one) before the "
                      "Service is left for the next reconciliation, said "
                      "in the log."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    """The handler needs its service subnet (checked as the files are
    loaded: a start without it exits 78, naming the option)."""
    if not needs(conf).handlers:
        return
    if HANDLER in conf.controller.handlers and \
            not conf.services.service_subnet_id:
        raise ValueError("invalid value for [services] service_subnet_id: "
                         f"required by the {HANDLER} handler")
