"""[cni_daemon] (Kuryr's names): the CNI API served by the Server worker."""
from __future__ import annotations

from oslo_config import cfg

GROUP = "cni_daemon"

OPTS = [
    cfg.IntOpt("cni_failures_count", default=3, min=1, mutable=True,
               help="Consecutive internal CNI ADD failures after which "
                    "/alive fails. Malformed requests, vanished pods and "
                    "client timeouts never count; a successful ADD resets "
                    "the count."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
