"""[ipam]: the embedded host-local IPAM (subnet, gateway, range, state).

:func:`validate` refuses a bad combination at start with one line naming the
option; :func:`settings` turns the options into the parsed values that
:class:`kuryr_supervisor.cni.ipam.IpamStore` takes.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import os

from oslo_config import cfg

GROUP = "ipam"
DB_FILE = "ipam.sqlite"

OPTS: list[cfg.Opt] = [
    cfg.StrOpt("subnet", default="10.99.0.0/16",
               help="IPv4 subnet pod addresses are taken from (CIDR). The "
                    "default avoids the usual pod CIDRs (10.244.0.0/16, "
                    "10.42.0.0/16, 10.85.0.0/16, 10.88.0.0/16). Each node "
                    "needs its own subnet."),
    cfg.StrOpt("gateway", default="",
               help="Gateway address, held by the bridge. Empty: the first "
                    "host address of the subnet. Never handed to a pod."),
    cfg.StrOpt("range_start", default="",
               help="First address handed to pods. Empty: the first host "
                    "address of the subnet."),
    cfg.StrOpt("range_end", default="",
               help="Last address handed to pods. Empty: the last host "
                    "address of the subnet (before broadcast)."),
    cfg.BoolOpt("use_node_pod_cidr", default=False,
                help="With Kubernetes configured, take the subnet from this "
                     "Node's spec.podCIDR instead of [ipam] subnet (ADD "
                     "answers code 11 until the podCIDR is known)."),
    cfg.StrOpt("state_dir", default="/var/lib/kuryr-supervisor",
               help="Directory of the allocation database (created 0700). "
                    "It must survive daemon restarts, and every process of "
                    "the daemon must see the same directory."),
]


@dataclasses.dataclass(frozen=True)
class IpamSettings:
    """The [ipam] options, parsed; ``None`` means "derive from subnet"."""

    subnet: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address | None
    range_start: ipaddress.IPv4Address | None
    range_end: ipaddress.IPv4Address | None
    db_path: str


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def _address(name: str, value: str) -> ipaddress.IPv4Address | None:
    if not value:
        return None
    try:
        return ipaddress.IPv4Address(value)
    except ValueError as exc:
        raise ValueError(f"[ipam] {name} {value!r} is not an IPv4 address"
                         ) from exc


def settings(conf: cfg.ConfigOpts) -> IpamSettings:
    """Parse and check [ipam]; ValueError names the offending option."""
    group = conf[GROUP]
    try:
        subnet = ipaddress.IPv4Network(group.subnet, strict=True)
    except ValueError as exc:
        raise ValueError(f"[ipam] subnet {group.subnet!r} is not an IPv4 "
                         f"network in CIDR form: {exc}") from exc
    if subnet.prefixlen > 30:
        raise ValueError(f"[ipam] subnet {subnet} is too small: at most /30")
    first, last = subnet.network_address + 1, subnet.broadcast_address - 1
    parsed = {name: _address(name, getattr(group, name))
              for name in ("gateway", "range_start", "range_end")}
    for name, ip in parsed.items():
        if ip is not None and not first <= ip <= last:
            raise ValueError(f"[ipam] {name} {ip} is not inside subnet "
                             f"{subnet}" + (" (network or broadcast)"
                                            if ip in subnet else ""))
    start = parsed["range_start"] or first
    end = parsed["range_end"] or last
    if start > end:
        raise ValueError(f"[ipam] range_start {start} is after range_end "
                         f"{end}")
    gateway = parsed["gateway"] or first
    if start == end == gateway:
        raise ValueError(f"[ipam] range {start}-{end} holds only the "
                         f"gateway {gateway}")
    if not group.state_dir or not os.path.isabs(group.state_dir):
        raise ValueError(f"[ipam] state_dir {group.state_dir!r} is not an "
                         "absolute path")
    return IpamSettings(subnet=subnet, gateway=parsed["gateway"],
                        range_start=parsed["range_start"],
                        range_end=parsed["range_end"],
                        db_path=os.path.join(group.state_dir, DB_FILE))


def validate(conf: cfg.ConfigOpts) -> None:
    settings(conf)
