"""[binding]: the embedded bridge binding (bridge name, MTU)."""
from __future__ import annotations

import re

from oslo_config import cfg

GROUP = "binding"
# What the kernel accepts as an interface name (dev_valid_name), minus ':'
# which the ip tool treats as an alias separator and '%' (a name template).
_IFNAME = re.compile(r"^[^\s/:%]{1,15}$")

OPTS: list[cfg.Opt] = [
    cfg.StrOpt("bridge", default="kuryr0",
               help="Linux bridge the pods' host veth ends are attached to; "
                    "it holds the [ipam] gateway address. Created if "
                    "missing."),
    cfg.IntOpt("mtu", default=1500, min=68, max=65535,
               help="MTU of both ends of every pod veth. Set it to the "
                    "node's uplink MTU minus any encapsulation overhead."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    bridge = conf[GROUP].bridge
    if not _IFNAME.match(bridge) or bridge in (".", ".."):
        raise ValueError(f"[binding] bridge {bridge!r} is not a valid "
                         "interface name (1-15 characters, no space, '/' "
                         "or ':')")
