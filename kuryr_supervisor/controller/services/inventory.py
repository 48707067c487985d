"""The cluster's load balancers as Octavia has them, by Service UID.

Ownership is by tags and names, never by a finalizer: every object the
handler makes carries the cluster's tag (``kuryr-supervisor:<cluster
id>``, as the pods' ports) and the services tag (:data:`SERVICES_TAG`),
and a load balancer is named ``<cluster tag>:<Service UID>``
(:class:`Naming`), its description the Service's ``namespace/name``.
Only load balancers with both tags and such a name are ever changed or
deleted; anything else in the project is left alone.

A full look (:meth:`Inventory.refresh`) is three lists filtered by both
tags (load balancers, listeners, pools; paged), never a call per
Service. Members are not in those lists: each pool's are kept from the
last status tree read or the last batch written, and trusted while the
pool's member ids, which the pool list does give, are those seen with
them (after a batch of ours, those the next list gives); a Service whose
pools' members are not known is *incomplete*, and its worker reads its
load balancer's tree before it plans.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

from kuryr_supervisor.controller.openstack.lbwire import (
    Listener,
    LoadBalancer,
    Member,
    Pool,
)
from kuryr_supervisor.controller.openstack.octavia import OctaviaApi
from kuryr_supervisor.controller.services.plan import (
    Actual,
    ActualListener,
    ActualPool,
)

LOG = logging.getLogger(__name__)

#: The tag of every object of the services handler, beside the cluster's.
SERVICES_TAG = "kuryr-supervisor:services"
_UID = re.compile(r"[A-Za-z0-9-]{1,64}")


class Naming:
    """The tags and names of the cluster's load balancers."""

    def __init__(self, cluster_tag: str) -> None:
        self.cluster_tag = cluster_tag
        self.tags = (cluster_tag, SERVICES_TAG)

    def name(self, uid: str) -> str:
        return f"{self.cluster_tag}:{uid}"

    def uid_of(self, lb: LoadBalancer) -> str:
        """The Service UID ``lb`` is named for ("": not one of ours)."""
        prefix = f"{self.cluster_tag}:"
        uid = lb.name[len(prefix):] if lb.name.startswith(prefix) else ""
        ours = set(self.tags) <= set(lb.tags)
        return uid if ours and _UID.fullmatch(uid) else ""


def assemble(lb_id: str, vip: str, status: str, listeners: Iterable[Listener],
             pools: Iterable[Pool], members: Mapping[str, frozenset[Member]]
             ) -> Actual:
    """The :class:`~.plan.Actual` of one load balancer: its listeners with
    their default pools and ``members`` (pool id -> members; a pool
    missing there has none known, see the module)."""
    by_id = {p.id: p for p in pools if p.lb_id == lb_id}
    mine = sorted((li for li in listeners if li.lb_id == lb_id),
                  key=lambda li: (li.protocol, li.port))
    used = {li.default_pool_id for li in mine}
    out = []
    for li in mine:
        pool = by_id.get(li.default_pool_id)
        out.append(ActualListener(li.id, li.protocol, li.port, None if pool is None
                                  else ActualPool(pool.id, pool.algorithm,
                                                  members.get(pool.id,
                                                              frozenset()))))
    return Actual(lb_id, vip, status, tuple(out),
                  tuple(sorted(p for p in by_id if p not in used)))


class Inventory:
    """What Octavia has, as last seen (see the module); ``api`` makes the
    lists (the handler's loop's bounded calls)."""

    def __init__(self, api: OctaviaApi) -> None:
        self.api = api
        #: uid -> its load balancer as last seen
        self.found: dict[str, Actual] = {}
        #: uid -> the Service's ``namespace/name`` (the description)
        self.described: dict[str, str] = {}
        #: uids whose members are all known
        self.complete: set[str] = set()
        #: Octavia's lists held only tagged objects: a sweep may trust them
        self.proven = True
        #: pool id -> (member ids seen with them, or None; members)
        self._members: dict[str, tuple[frozenset[str] | None,
                                       frozenset[Member]]] = {}

    def refresh(self, naming: Naming) -> None:
        """Three lists (see the module); an OpenStack error leaves what
        was seen before."""
        api, tags = self.api, list(naming.tags)
        lbs = api.load_balancers(tags=tags)
        listeners = api.listeners(tags=tags)
        pools = api.pools(tags=tags)
        every: list[LoadBalancer | Listener | Pool] = [*lbs, *listeners,
                                                        *pools]
        self.proven = all(set(tags) <= set(x.tags) for x in every)
        found: dict[str, Actual] = {}
        described: dict[str, str] = {}
        complete: set[str] = set()
        for lb in sorted(lbs, key=lambda x: x.id):
            uid = naming.uid_of(lb)
            if not uid:
                continue
            if uid in found:
                LOG.warning("two load balancers for Service %s: %s and %s; "
                            "only %s is looked after", uid, found[uid].id,
                            lb.id, found[uid].id)
                continue
            members, known = self._known(lb.id, pools)
            found[uid] = assemble(lb.id, lb.vip, lb.status, listeners, pools,
                                  members)
            described[uid] = lb.description
            if known:
                complete.add(uid)
        live = {p.id for p in pools}
        self._members = {k: v for k, v in self._members.items() if k in live}
        self.found, self.described, self.complete = found, described, complete

    def _known(self, lb_id: str, pools: Iterable[Pool]
               ) -> tuple[dict[str, frozenset[Member]], bool]:
        """The members of ``lb_id``'s pools known, and whether all are."""
        out, known = {}, True
        for pool in pools:
            if pool.lb_id != lb_id:
                continue
            seen = self._members.get(pool.id)
            if seen is None:
                known = False
                continue
            ids, members = seen
            if ids is None:         # written by us since: these are its ids
                self._members[pool.id] = (pool.member_ids, members)
            elif ids != pool.member_ids:
                known = False
            out[pool.id] = members
        return out, known

    def put(self, uid: str, actual: Actual | None, complete: bool,
            ids: Mapping[str, frozenset[str]] | None = None,
            description: str = "") -> None:
        """What a worker left: ``actual`` (None: no load balancer), its
        members known (``complete``), with the member ids of each pool
        when a status tree said them."""
        if actual is None:
            self.found.pop(uid, None)
            self.described.pop(uid, None)
            self.complete.discard(uid)
            return
        self.found[uid] = actual
        if description:
            self.described[uid] = description
        if not complete:
            self.complete.discard(uid)
            return
        self.complete.add(uid)
        for li in actual.listeners:
            if li.pool is not None:
                self._members[li.pool.id] = (
                    (ids or {}).get(li.pool.id), li.pool.members)
