"""The Octavia calls the services handler makes, over the adapter's
keystoneauth sessions.

Octavia is the ``load-balancer`` service of the token's catalog (the
region and interfaces of ``[neutron]``); its requests share the adapter's
sessions, token and request timeout (:mod:`.timeouts`), and every write
goes through the fenced session (:mod:`.sendfence`) after the write
fence's own check, as Neutron's do. Answers are decoded by
:mod:`.lbwire`, whose errors they raise: 409 on a busy load balancer is
:class:`~.lbwire.LoadBalancerBusy`, never retried here (the handler looks
again and plans the whole difference anew).

Two call modes over one transport, as :mod:`.neutron`'s: :class:`Octavia`
(the adapter's :meth:`~.adapter.OpenStack.octavia`), each call on a call
path of its own (``octavia``: a hung Octavia never holds a Neutron or
Keystone call) under the whole-call deadline while the caller beats; and
:class:`Direct` (:meth:`OctaviaApi.within`), in the caller's own thread
with the request timeout alone (the handler's workers, which the handler's
loop waits for while it beats).

Few calls: the cluster's load balancers, listeners and pools are each one
list filtered by tags (paged, as Octavia pages); members are in a load
balancer's status tree (one call per load balancer). A load balancer is
created whole (listeners, default pools, members: one POST); otherwise a
listener, its pool and the pool's members are one write each; a pool's
members are replaced in one batch (``PUT .../members``: Octavia keeps
those whose address and port match); a load balancer is deleted with
everything under it (``cascade``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from kuryr_supervisor.controller.openstack import lbwire
from kuryr_supervisor.controller.openstack.deadline import BoundedCalls, CallPath
from kuryr_supervisor.controller.openstack.lbwire import (
    Listener,
    LoadBalancer,
    Pool,
    Tree,
    decoded,
)
from kuryr_supervisor.controller.openstack.wire import (
    OpenStackRefused,
    OpenStackUnavailable,
)
from kuryr_supervisor.kubernetes.fence import WriteFence

T = TypeVar("T")

#: Where the API lives under the catalog's endpoint.
BASE = "/v2/lbaas"
#: Objects per page of a list (Octavia's own cap is 1000).
PAGE_SIZE = 500
#: A list of more pages than this is a loop.
MAX_PAGES = 1000


@dataclasses.dataclass(frozen=True)
class MemberSpec:
    address: str
    port: int
    subnet_id: str = ""

    def body(self, tags: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"address": self.address,
                               "protocol_port": self.port}
        if self.subnet_id:
            out["subnet_id"] = self.subnet_id
        if tags:
            out["tags"] = list(tags)
        return out


@dataclasses.dataclass(frozen=True)
class ListenerSpec:
    """A listener with its default pool and the pool's members."""

    protocol: str
    port: int
    algorithm: str
    members: tuple[MemberSpec, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.protocol}:{self.port}"

    def pool_body(self, tags: Sequence[str], *,
                  members: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name, "protocol": self.protocol,
            "lb_algorithm": self.algorithm, "tags": list(tags)}
        if members:
            body["members"] = [m.body(tags) for m in self.members]
        return body

    def listener_body(self, tags: Sequence[str]) -> dict[str, Any]:
        return {"name": self.name, "protocol": self.protocol,
                "protocol_port": self.port, "tags": list(tags)}

    def body(self, tags: Sequence[str]) -> dict[str, Any]:
        """Within a load balancer's create: with its default pool."""
        return dict(self.listener_body(tags),
                    default_pool=self.pool_body(tags))


class OctaviaTransport:
    """One Octavia request: reads through ``reads``, writes through
    ``writes`` once ``fence`` allows them (keystoneauth adapters of the
    ``load-balancer`` service)."""

    def __init__(self, reads: Any, writes: Any, fence: WriteFence) -> None:
        self.reads, self.writes, self.fence = reads, writes, fence

    def call(self, method: str, path: str, *, timeout: float,
             ok: tuple[int, ...] = (200,), **kwargs: Any) -> Any:
        from keystoneauth1 import exceptions as ks_exc

        from kuryr_supervisor.controller.openstack.keystone import failure
        what = f"Octavia {method} {path}"
        writes = method != "GET"
        if writes:
            self.fence.check(what)      # a replica that lost its lease: exits
        try:
            resp = (self.writes if writes else self.reads).request(
                path, method, raise_exc=False, timeout=timeout, **kwargs)
        except ks_exc.Unauthorized as exc:
            raise OpenStackUnavailable(f"Keystone refused: {exc}", 401) from exc
        except ks_exc.EndpointNotFound as exc:
            raise OpenStackRefused(f"{what}: no load-balancer endpoint in "
                                   f"the catalog: {exc}", 404) from exc
        except ks_exc.ClientException as exc:
            raise OpenStackUnavailable(failure(what, exc, timeout)) from exc
        return answer(what, resp.status_code, resp.content, ok)


def answer(what: str, status: int, content: bytes,
           ok: tuple[int, ...]) -> Any:
    """Octavia's answer to ``what``: its JSON object when ``status`` is
    ``ok`` (None for an empty body), else the error it means."""
    import json
    text = content.decode("utf-8", "replace")
    if status in ok:
        if not content:
            return None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise OpenStackUnavailable(f"{what}: HTTP {status} with a body "
                                       f"that is not JSON: {text[:80]!r}",
                                       status) from exc
        if not isinstance(data, dict):
            raise OpenStackUnavailable(f"{what}: HTTP {status} with a body "
                                       "that is not an object", status)
        return data
    if 200 <= status < 300:
        raise OpenStackUnavailable(f"{what}: unexpected HTTP {status} "
                                   f"{text[:80]!r}", status)
    raise lbwire.refined(status, f"{what}: HTTP {status} {text[:300]}")


class OctaviaApi:
    """The calls (see the module) over ``transport``, each request within
    ``timeout`` seconds; how a call is made is its mode's."""

    def __init__(self, transport: OctaviaTransport, timeout: float) -> None:
        self.transport = transport
        self.timeout = timeout

    def _bounded(self, what: str, fn: Callable[..., T], *args: Any,
                 via: CallPath | None = None, **kwargs: Any) -> T:
        """One call, ``what`` naming it, as this mode makes it."""
        raise NotImplementedError

    def within(self, timeout: float) -> OctaviaApi:
        """The same calls in the caller's own thread, ``timeout`` per
        request."""
        return Direct(self.transport, timeout)

    def _call(self, method: str, path: str, *, ok: tuple[int, ...] = (200,),
              **kwargs: Any) -> Any:
        return self._bounded(f"Octavia {method} {path}", self.transport.call,
                             method, BASE + path, timeout=self.timeout, ok=ok,
                             **kwargs)

    # -- reads ---------------------------------------------------------------
    def _list(self, plural: str, decode: Callable[[Mapping[str, Any]], T],
              params: Mapping[str, str]) -> list[T]:
        """Every object of ``plural`` ``params`` select, page by page."""
        query = dict(params, limit=str(PAGE_SIZE))
        out: list[T] = []
        for _ in range(MAX_PAGES):
            data = self._call("GET", f"/{plural}", params=query)
            items = data.get(plural) if data else None
            if not isinstance(items, list):
                raise OpenStackUnavailable(f"Octavia GET {plural}: no list")
            out += [decoded(plural, decode, o) for o in items]
            marker = _next_marker(data.get(f"{plural}_links"))
            if not marker or not items:
                return out
            query["marker"] = marker
        raise OpenStackUnavailable(f"Octavia GET {plural}: more than "
                                   f"{MAX_PAGES} pages")

    @staticmethod
    def _filters(tags: Sequence[str], **more: str) -> dict[str, str]:
        params = {k: v for k, v in more.items() if v}
        if tags:
            params["tags"] = ",".join(tags)
        return params

    def load_balancers(self, *, tags: Sequence[str] = (),
                       vip_address: str = "") -> list[LoadBalancer]:
        """The project's load balancers with every one of ``tags`` (and
        the VIP ``vip_address``, when given)."""
        return self._list("loadbalancers", lbwire.load_balancer,
                          self._filters(tags, vip_address=vip_address))

    def listeners(self, *, tags: Sequence[str] = (),
                  lb_id: str = "") -> list[Listener]:
        return self._list("listeners", lbwire.listener,
                          self._filters(tags, loadbalancer_id=lb_id))

    def pools(self, *, tags: Sequence[str] = (),
              lb_id: str = "") -> list[Pool]:
        return self._list("pools", lbwire.pool,
                          self._filters(tags, loadbalancer_id=lb_id))

    def reachable(self) -> None:
        """Octavia answers an authenticated read (one load balancer of
        the project, at most): the readiness check's probe."""
        self._call("GET", "/loadbalancers", params={"limit": "1"})

    def load_balancer(self, lb_id: str) -> LoadBalancer | None:
        """One load balancer (None: gone, or DELETED)."""
        try:
            data = self._call("GET", f"/loadbalancers/{lb_id}")
        except OpenStackRefused as exc:
            if exc.status == 404:
                return None
            raise
        lb = decoded("load balancer", lbwire.load_balancer,
                     (data or {}).get("loadbalancer"))
        return None if lb.status == "DELETED" else lb

    def tree(self, lb_id: str) -> Tree | None:
        """The load balancer's status tree: each pool's members (None:
        the load balancer is gone)."""
        try:
            data = self._call("GET", f"/loadbalancers/{lb_id}/status")
        except OpenStackRefused as exc:
            if exc.status == 404:
                return None
            raise
        return decoded("status tree", lbwire.tree, data)

    # -- writes ----------------------------------------------------------------
    def create_load_balancer(self, *, name: str, description: str,
                             vip_address: str, vip_subnet_id: str,
                             tags: Sequence[str], provider: str,
                             listeners: Sequence[ListenerSpec]
                             ) -> LoadBalancer:
        """One load balancer with its listeners, their default pools and
        their members: one POST."""
        body = {"name": name, "description": description[:255],
                "vip_address": vip_address, "vip_subnet_id": vip_subnet_id,
                "tags": list(tags),
                "listeners": [li.body(tags) for li in listeners]}
        if provider:
            body["provider"] = provider
        data = self._call("POST", "/loadbalancers", ok=(201,),
                          json={"loadbalancer": body})
        return decoded("load balancer", lbwire.load_balancer,
                       (data or {}).get("loadbalancer"))

    def _delete(self, path: str, **params: str) -> bool:
        try:
            self._call("DELETE", path, ok=(204,), params=params or None)
        except OpenStackRefused as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_load_balancer(self, lb_id: str) -> bool:
        """Delete it and everything under it; False if already gone."""
        return self._delete(f"/loadbalancers/{lb_id}", cascade="true")

    def create_listener(self, lb_id: str, spec: ListenerSpec,
                        tags: Sequence[str]) -> Listener:
        """A listener, without a pool (:meth:`create_pool` makes it: a
        ``default_pool`` in a listener's own create fails inside Octavia
        19, HTTP 500, though its load balancer's create takes one)."""
        body = dict(spec.listener_body(tags), loadbalancer_id=lb_id)
        data = self._call("POST", "/listeners", ok=(201,),
                          json={"listener": body})
        return decoded("listener", lbwire.listener,
                       (data or {}).get("listener"))

    def delete_listener(self, listener_id: str) -> bool:
        return self._delete(f"/listeners/{listener_id}")

    def create_pool(self, listener_id: str, spec: ListenerSpec,
                    tags: Sequence[str]) -> Pool:
        """The listener's default pool, without members
        (:meth:`replace_members` adds them: members in a pool's own create
        fail inside Octavia 19, HTTP 500, as a listener's pool does)."""
        body = dict(spec.pool_body(tags, members=False),
                    listener_id=listener_id)
        data = self._call("POST", "/pools", ok=(201,), json={"pool": body})
        return decoded("pool", lbwire.pool, (data or {}).get("pool"))

    def delete_pool(self, pool_id: str) -> bool:
        return self._delete(f"/pools/{pool_id}")

    def replace_members(self, pool_id: str, members: Sequence[MemberSpec],
                        tags: Sequence[str]) -> None:
        """The pool's members become ``members``, in one batch: those of
        the same address and port are kept, the rest added or deleted."""
        self._call("PUT", f"/pools/{pool_id}/members", ok=(202,),
                   json={"members": [m.body(tags) for m in members]})

    def add_member(self, pool_id: str, member: MemberSpec,
                   tags: Sequence[str]) -> None:
        """One member added to the pool, the others left untouched (a
        batch also updates every member it keeps: one more request of the
        OVN provider, handled before the batch's deletions)."""
        self._call("POST", f"/pools/{pool_id}/members", ok=(201,),
                   json={"member": member.body(tags)})

    def delete_member(self, pool_id: str, member_id: str) -> bool:
        """One member deleted, the others left untouched; False if it
        was already gone."""
        return self._delete(f"/pools/{pool_id}/members/{member_id}")


def _next_marker(links: Any) -> str:
    """The marker of a list's ``next`` link ("": the last page)."""
    for link in links or ():
        if isinstance(link, Mapping) and link.get("rel") == "next":
            found = parse_qs(urlsplit(str(link.get("href") or "")).query)
            return (found.get("marker") or [""])[-1]
    return ""


class Octavia(BoundedCalls, OctaviaApi):
    """The calls each on the ``octavia`` call path under the whole-call
    ``deadline`` while ``beat`` is called (see the module)."""

    def __init__(self, transport: OctaviaTransport, timeout: float, *,
                 deadline: float,
                 beat: Callable[[], None] | None = None) -> None:
        BoundedCalls.__init__(self, deadline, thread_name="octavia",
                              beat=beat)
        OctaviaApi.__init__(self, transport, timeout)


class Direct(OctaviaApi):
    """The calls in the caller's thread, each bounded by the request
    timeout alone."""

    def _bounded(self, what: str, fn: Callable[..., T], *args: Any,
                 via: CallPath | None = None, **kwargs: Any) -> T:
        return fn(*args, **kwargs)
