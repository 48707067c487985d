"""An ``ipBlock`` as Neutron can hold it.

Neutron's rules only admit: there is no rule that refuses an ``except``.
So ``cidr`` minus its ``except`` entries is written as the CIDRs that
cover exactly what is left (at most one per prefix length between the
block's and each exception's, e.g. ``10.0.0.0/16`` minus ``10.0.5.0/24``
is 8 networks): bounded by the address length, never by pods.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _net(text: str) -> Network:
    return ipaddress.ip_network(text, strict=False)


def remaining(cidr: str, excepts: Iterable[str]) -> tuple[str, ...]:
    """The CIDRs covering ``cidr`` minus every network of ``excepts``
    (one of another family, or outside ``cidr``, takes nothing), sorted
    and collapsed."""
    nets: list[Network] = [_net(cidr)]
    for text in excepts:
        cut = _net(text)
        left: list[Network] = []
        for net in nets:
            if net.version != cut.version or not net.overlaps(cut):
                left.append(net)
            elif net.subnet_of(cut):            # type: ignore[arg-type]
                continue
            else:
                left.extend(net.address_exclude(cut))  # type: ignore[arg-type]
        nets = left
    v4 = ipaddress.collapse_addresses(
        n for n in nets if isinstance(n, ipaddress.IPv4Network))
    v6 = ipaddress.collapse_addresses(
        n for n in nets if isinstance(n, ipaddress.IPv6Network))
    return tuple(str(n) for n in [*sorted(v4), *sorted(v6)])


def ethertype(cidr: str) -> str:
    """Neutron's ethertype of a network."""
    return "IPv4" if _net(cidr).version == 4 else "IPv6"


def host(ip: str) -> str:
    """An address as the prefix an address group holds (/32, /128)."""
    addr = ipaddress.ip_address(ip)
    return f"{addr}/{addr.max_prefixlen}"
