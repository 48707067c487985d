"""The netlink adapter: the only package that imports pyroute2.

Handles are short-lived (opened per operation or per phase of an operation,
closed after), so no worker holds netlink state across a fork or a hang.
Every pyroute2 or OS failure leaves this module as a :class:`NetlinkError`
carrying the errno (``EEXIST``, ``ENODEV``, ``ENOENT`` ...) so callers decide
by errno, never by message text. A network namespace that does not exist is a
:class:`NetnsNotFound`.

Namespaces are passed as an open file descriptor (see :func:`open_netns`):
the caller opens the path given by the runtime (``/var/run/netns/x`` or
``/proc/<pid>/ns/net``) once, so every step of an operation talks to the same
namespace even if the path is unlinked meanwhile. A netlink socket belongs to
the namespace it was created in, so a throwaway thread enters the namespace
(``setns`` moves only the calling thread), creates the socket and ends; the
socket is handed to ``IPRoute(use_socket=...)``. pyroute2's own
``IPRoute(netns=...)`` forks a helper process per handle instead, which is
about 15 times slower and forks a multi-threaded daemon; and with its default
``flags=O_CREAT`` it would *create* a namespace that is missing.

Two layers. pyroute2 handles (:func:`handle`) serve the reads that decode
much (CHECK, GC). The CNI hot path -- the fixed requests of a pod's ADD and
DEL -- and everything an idle daemon does (the bridge's full check, the
environment watch, the liveness probe) go through :func:`rtnl`, a raw socket
with struct-packed requests (see :mod:`.rtnl` and :mod:`.links` for why),
under the same errno-keeping errors.

Parts: :mod:`.base` (errors, namespaces, the Link record), :mod:`.rtnl`
(the raw hot path), :mod:`.links` (raw reads, the bridge and the liveness
probe), :mod:`.ethtool` (transmit checksum offload, by ioctl) and :mod:`.pyroute` (pyroute2 handles and decoding for CHECK and GC,
imported lazily). Callers use this package's
names only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kuryr_supervisor.cni.netlink.base import (
    AF_INET,
    CLONE_NEWNET,
    NETLINK_ROUTE,
    Link,
    NetlinkError,
    NetnsNotFound,
    WrongLinkKind,
    open_netns,
)
from kuryr_supervisor.cni.netlink.ethtool import tx_checksum
from kuryr_supervisor.cni.netlink.links import (
    addresses,
    ensure_bridge,
    link_kind,
    probe,
    read_link,
)
from kuryr_supervisor.cni.netlink.rtnl import (
    LOOPBACK_INDEX,
    Rtnl,
    configure_pod,
    new_veth,
    pod_index,
    random_mac,
    remove_link,
    rtnl,
)

if TYPE_CHECKING:
    from kuryr_supervisor.cni.netlink.pyroute import (
        Route,
        add_address,
        add_default_route,
        create_veth,
        delete_link,
        get_link,
        handle,
        link_index,
        list_links,
        move_link,
        routes,
        set_link,
    )

#: Names served by :mod:`.pyroute`, imported on first use (see below).
_PYROUTE = frozenset({
    "Route", "add_address", "add_default_route", "create_veth",
    "delete_link", "get_link", "handle", "link_index", "list_links",
    "move_link", "routes", "set_link"})


def __getattr__(name: str) -> Any:
    """pyroute2 is imported by the first caller that needs it (CHECK, GC,
    tests), never by an idle daemon: the bridge, the environment watch and
    the liveness probe use :mod:`.links` (see there for why)."""
    if name in _PYROUTE:
        from kuryr_supervisor.cni.netlink import pyroute
        return getattr(pyroute, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AF_INET", "CLONE_NEWNET", "LOOPBACK_INDEX", "NETLINK_ROUTE", "Link",
    "NetlinkError", "NetnsNotFound", "Route", "Rtnl", "WrongLinkKind",
    "add_address", "add_default_route", "addresses", "configure_pod",
    "create_veth", "delete_link", "ensure_bridge", "get_link", "handle",
    "link_index", "link_kind", "list_links", "move_link", "new_veth",
    "open_netns", "pod_index", "probe", "random_mac", "read_link",
    "remove_link", "routes", "rtnl", "set_link", "tx_checksum",
]
