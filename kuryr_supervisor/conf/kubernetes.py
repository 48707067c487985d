"""[kubernetes] (Kuryr's names where they exist), [watcher] and the Node
condition options of [health].

With none of ``api_root``, ``kubeconfig`` or an in-cluster service account
present the daemon runs standalone (see :func:`kuryr_supervisor.kubernetes.client.is_configured`).
Client timeouts stay well below the probe periods so an API outage shows up
as a failed readiness check, never as a hung worker.
"""
from __future__ import annotations

from oslo_config import cfg

GROUP = "kubernetes"
WATCHER_GROUP = "watcher"
HEALTH_GROUP = "health"

OPTS: list[cfg.Opt] = [
    cfg.StrOpt("api_root", default="",
               help="URL of the Kubernetes API, e.g. https://10.0.0.1:6443. "
                    "Empty: a kubeconfig if set, else the in-cluster service "
                    "account, else standalone mode."),
    cfg.StrOpt("token_file", default="",
               help="File holding the bearer token used with api_root; "
                    "re-read periodically so rotated tokens are picked up."),
    cfg.StrOpt("ssl_ca_crt_file", default="",
               help="CA bundle verifying the API server's certificate."),
    cfg.BoolOpt("ssl_verify_server_crt", default=False,
                help="Verify the API server's certificate (api_root only; "
                     "the in-cluster and kubeconfig modes always verify)."),
    cfg.StrOpt("kubeconfig", default="",
               help="Path of a kubeconfig file; used when api_root is empty."),
    cfg.StrOpt("node_name", default="",
               help="This node's name. Empty: the KURYR_NODE_NAME or "
                    "NODE_NAME environment variable, else the hostname."),
    cfg.FloatOpt("request_timeout", default=5.0, min=0.1, max=60.0,
                 help="Connect and read timeout in seconds of ordinary API "
                      "calls (list, get, patch)."),
    cfg.IntOpt("watch_timeout", default=60, min=1, max=1800,
               help="Server-side timeoutSeconds of one watch request; the "
                    "watch is then resumed from the last resourceVersion."),
    cfg.FloatOpt("api_check_interval", default=10.0, min=0.1, mutable=True,
                 help="Seconds a k8s-api readiness result (/readyz) is "
                      "reused, so a node does not poll the API server at "
                      "the health check rate."),
    cfg.FloatOpt("api_check_timeout", default=2.0, min=0.1, max=30.0,
                 mutable=True,
                 help="Timeout in seconds of one /readyz request."),
]

WATCHER_OPTS: list[cfg.Opt] = [
    cfg.FloatOpt("reclaim_interval", default=30.0, min=0.1, mutable=True,
                 help="Seconds between reconciliations of IP allocations "
                      "against the pods on this node (or, standalone, "
                      "against existing network namespaces)."),
    cfg.FloatOpt("backoff_max", default=30.0, min=0.1, mutable=True,
                 help="Upper bound in seconds of the delay between attempts "
                      "to reach the API after errors (doubles from 0.5 s)."),
]

NODE_CONDITION_OPTS: list[cfg.Opt] = [
    cfg.StrOpt("node_condition_type", default="",
               help="Type of the Node condition published with the daemon's "
                    "health (e.g. KuryrCNIHealthy), for node auto-healers. "
                    "Empty disables publishing. Needs nodes/status patch."),
    cfg.FloatOpt("node_condition_grace", default=60.0, min=0.0, mutable=True,
                 help="Seconds the daemon must stay unhealthy before the "
                      "condition turns from True to False."),
    cfg.BoolOpt("node_events", default=True,
                help="Post Events on the Node (worker restarted, budget "
                     "exhausted, readiness lost or regained, environment "
                     "fault), aggregated and rate-limited as client-go's "
                     "recorder does. Needs events create and patch."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)
    conf.register_opts(WATCHER_OPTS, group=WATCHER_GROUP)
    conf.register_opts(NODE_CONDITION_OPTS, group=HEALTH_GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS), (WATCHER_GROUP, WATCHER_OPTS),
            (HEALTH_GROUP, NODE_CONDITION_OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    root = conf[GROUP].api_root
    if root and not root.startswith(("http://", "https://")):
        raise ValueError(f"[kubernetes] api_root {root!r} is not an http(s) "
                         "URL")
