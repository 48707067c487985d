"""Where a Service's members are: the Neutron subnet of each endpoint.

The OVN provider needs a member's subnet (it attaches the load balancer to
that subnet's network); a member sent without one is refused unless it is
in the VIP's subnet, and a batch replace is all or nothing. So every
member goes with the subnet that holds its address: the smallest of the
IPv4 subnets the controller's project sees (its own and shared ones),
listed from Neutron at each full reconciliation (one call). Pods are on
the pod subnet; the ``kubernetes`` Service's endpoints (the API servers)
are on the nodes' subnet, found the same way. An endpoint in none of them
is left out of its pool and said (:func:`placed`), never sent.
"""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Iterable

from kuryr_supervisor.controller.openstack.wire import Subnet
from kuryr_supervisor.controller.services.desired import Wanted


class Subnets:
    """The subnets ``lister`` gives, smallest first (see the module)."""

    def __init__(self, lister: Callable[[], Iterable[Subnet]]) -> None:
        self._lister = lister
        self._nets: list[tuple[ipaddress.IPv4Network, str]] = []
        self.known = False

    def refresh(self) -> None:
        """List them again (an OpenStack error leaves them as they were)."""
        found = [(s.cidr, s.id) for s in self._lister()]
        self._nets = sorted(found, key=lambda n: -n[0].prefixlen)
        self.known = True

    def of(self, address: str) -> str:
        """The id of the smallest subnet holding ``address`` ("": none)."""
        ip = ipaddress.IPv4Address(address)
        return next((sid for net, sid in self._nets if ip in net), "")


def placed(wanted: Wanted, subnet_of: Callable[[str], str]
           ) -> tuple[Wanted, tuple[str, ...]]:
    """``wanted`` with only the members that have a subnet, and the
    addresses left out (sorted, each once)."""
    out: set[str] = set()
    listeners = []
    for li in wanted.listeners:
        keep = frozenset(m for m in li.members if subnet_of(m.address))
        out |= {m.address for m in li.members - keep}
        listeners.append(dataclasses.replace(li, members=keep))
    if not out:
        return wanted, ()
    return (dataclasses.replace(wanted, listeners=tuple(listeners)),
            tuple(sorted(out, key=ipaddress.IPv4Address)))
