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

Two layers. pyroute2 handles (:func:`handle`) serve everything that reads
and decodes (CHECK, GC, the bridge's full check, the liveness probe). The
CNI hot path -- the fixed requests of a pod's ADD and DEL -- goes through
:func:`rtnl`, a raw socket with struct-packed requests (see the section at
the end for why), under the same errno-keeping errors.

Parts: :mod:`.base` (errors, namespaces), :mod:`.pyroute` (pyroute2 handles
and decoding), :mod:`.rtnl` (the raw hot path). Callers use this package's
names only.
"""
from __future__ import annotations

from kuryr_supervisor.cni.netlink.base import (
    AF_INET,
    CLONE_NEWNET,
    NETLINK_ROUTE,
    NetlinkError,
    NetnsNotFound,
    WrongLinkKind,
    open_netns,
)
from kuryr_supervisor.cni.netlink.pyroute import (
    Link,
    Route,
    add_address,
    add_default_route,
    create_veth,
    delete_link,
    ensure_bridge,
    get_link,
    handle,
    link_index,
    list_links,
    move_link,
    probe,
    routes,
    set_link,
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

__all__ = [
    "AF_INET", "CLONE_NEWNET", "LOOPBACK_INDEX", "NETLINK_ROUTE", "Link",
    "NetlinkError", "NetnsNotFound", "Route", "Rtnl", "WrongLinkKind",
    "add_address",
    "add_default_route", "configure_pod", "create_veth", "delete_link",
    "ensure_bridge", "get_link", "handle", "link_index", "list_links",
    "move_link", "new_veth", "open_netns", "pod_index", "probe",
    "random_mac", "remove_link", "routes", "rtnl", "set_link",
]
