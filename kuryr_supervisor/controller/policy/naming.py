"""The names and tags of what the policy handler owns in Neutron.

As the other handlers', ownership is by tags and names derived from UIDs,
never by a finalizer: every security group and address group carries the
cluster's tag (``kuryr-supervisor:<cluster id>``) and :data:`POLICY_TAG`;
a policy's group is named ``<cluster tag>:np:<policy UID>`` (its
named-port variants add ``:<digest>``), an address group
``<cluster tag>:ag:<digest of its canonical key>``, the handler's own
groups ``<cluster tag>:<role>`` (a node's ``<cluster tag>:node:<digest
of its name>``). A name says what an object is for, so a
handler that restarts finds everything again by one list per kind, and
two policies with the same peer meet on one address group.
"""
from __future__ import annotations

import hashlib
import re

#: The tag of every object of the policy handler, beside the cluster's.
POLICY_TAG = "kuryr-supervisor:policy"
#: The handler's own security groups (see :mod:`.desired`).
OWN = ("base", "open-ingress", "open-egress", "selected")
_UID = re.compile(r"[A-Za-z0-9-]{1,64}")


def digest(text: str) -> str:
    """A short stable digest (names must stay well under 255)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Naming:
    """See the module; ``cluster_tag`` as the port handler's."""

    def __init__(self, cluster_tag: str) -> None:
        self.cluster_tag = cluster_tag
        self.tags = (cluster_tag, POLICY_TAG)

    def policy(self, uid: str, variant: str = "") -> str:
        """A policy's security group (``variant``: its named ports')."""
        name = f"{self.cluster_tag}:np:{uid}"
        return f"{name}:{variant}" if variant else name

    def address_group(self, key: str) -> str:
        """The address group of a canonical peer key."""
        return f"{self.cluster_tag}:ag:{digest(key)}"

    def own(self, role: str) -> str:
        """One of the handler's own groups (:data:`OWN`, ``canaries``)."""
        return f"{self.cluster_tag}:{role}"

    def node(self, node: str) -> str:
        """The group of a node's own addresses (named by digest: a node's
        name may be 253 characters)."""
        return f"{self.cluster_tag}:node:{digest(node)}"

    def uid_of(self, name: str) -> str:
        """The policy UID a security group is named for ("": none)."""
        prefix = f"{self.cluster_tag}:np:"
        uid = name[len(prefix):].split(":", 1)[0] \
            if name.startswith(prefix) else ""
        return uid if _UID.fullmatch(uid) else ""
