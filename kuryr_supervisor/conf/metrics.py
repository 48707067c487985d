"""[metrics]: the Prometheus listener, apart from the probe listener.

The probe listener stays on loopback for the kubelet; ``/metrics`` gets its
own address so it can be opened to a Prometheus server (the pod IP, via the
environment variable ``OS_METRICS__HOST`` that oslo.config reads) without
exposing ``/status`` and the probes with it.
"""
from __future__ import annotations

from oslo_config import cfg

GROUP = "metrics"

OPTS: list[cfg.Opt] = [
    cfg.HostAddressOpt("host", default="127.0.0.1",
                       help="Address the metrics listener binds. The "
                            "DaemonSet sets it to the pod IP with "
                            "OS_METRICS__HOST."),
    cfg.PortOpt("port", default=8091,
                help="Port of the metrics listener (only /metrics); 0 turns "
                     "it off (/metrics stays on the probe listener)."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    """Two listeners cannot share a port (either may bind every address)."""
    port = conf.metrics.port
    if port and port == conf.cni_health_server.port:
        raise ValueError(f"[metrics] port {port} is also [cni_health_server] "
                         "port")
