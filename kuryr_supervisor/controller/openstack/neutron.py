"""The Neutron calls the controller makes, over the adapter's transport.

Kept apart from :mod:`.adapter` (the keystoneauth session, the token, the
HTTP transport and its error mapping) so a new Neutron call or filter touches
this module only, and nothing here imports keystoneauth1: the transport
(:class:`Transport`, one request) is the adapter's. Answers are decoded by
:mod:`.wire`.

Two call modes over that one transport, each a class of its own: the
adapter itself (:class:`~.adapter.OpenStack`), whose every call runs on a
call path of its own under a whole-call deadline while the caller beats
(:class:`~.deadline.BoundedCalls`), and :class:`Direct`
(:meth:`NeutronApi.within`), whose calls run in the caller's own thread
with a per-request timeout of their own (a create sized for its ports,
the pools' threads): none queues behind the handler's calls.

Scope: the controller's ports are those with ``device_owner`` DEVICE_OWNER,
the cluster's tag (:func:`~.wire.cluster_tag`), on the pod network, in
the project; every lookup passes these as Neutron filters, so another
cluster's ports sharing the project are never seen, adopted or deleted.
The nodes' canaries are a family of their own, under another
``device_owner`` (:data:`~.wire.CANARY_OWNER`): the pods' lookups and
sweeps never see them.

Invariants: a list is read page by page, each page its own bounded call, and
is never longer than :data:`MAX_PAGES` pages; an answer without the expected
fields is :class:`OpenStackUnavailable` (an outage of the dependency, like a
timeout), never a fault of the caller.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from kuryr_supervisor.controller.openstack.addrgroups import AddressGroupCalls
from kuryr_supervisor.controller.openstack.deadline import CallPath
from kuryr_supervisor.controller.openstack.secgroups import SecurityGroupCalls
from kuryr_supervisor.controller.openstack.wire import (
    DEVICE_OWNER,
    Network,
    OpenStackRefused,
    OpenStackUnavailable,
    Port,
    PortQuota,
    Subnet,
    decode_port,
)

#: Ports per page of a port list: one page stays well under a second of
#: Neutron's time and a few MiB of JSON; 10,000 ports are ten pages.
PAGE_SIZE = 1000
#: A list of more pages than this is a loop, not a port list.
MAX_PAGES = 10_000
#: A list whose marker port vanished is read again from its first page at
#: most this many times (ports deleted faster than a list is read).
MAX_RESTARTS = 3
#: Device ids in one list's repeated ``device_id`` filter: about 2 KiB of
#: query string, under every server's request-line limit.
DEVICES_PER_LIST = 40


T = TypeVar("T")


class Transport(Protocol):
    """One Neutron request within ``timeout`` seconds: its answer's JSON
    object, or None for an empty body (the adapter's)."""

    def call(self, method: str, path: str, *, timeout: float,
             ok: tuple[int, ...] = (200,), **kwargs: Any) -> Any: ...


class NeutronApi(AddressGroupCalls, SecurityGroupCalls):
    """Ports, subnets, quotas (and security groups, :mod:`.secgroups`;
    NetworkPolicy's groups, rules and address groups, :mod:`.policycalls`
    and :mod:`.addrgroups`) over ``transport``, each request within
    ``timeout`` seconds; how a call is made is its mode's
    (:meth:`_bounded`, see the module)."""

    def __init__(self, transport: Transport, timeout: float) -> None:
        self.transport = transport
        #: The per-request timeout (seconds).
        self.timeout = timeout

    def _call(self, method: str, path: str, *, ok: tuple[int, ...] = (200,),
              **kwargs: Any) -> Any:
        return self.transport.call(method, path, timeout=self.timeout,
                                   ok=ok, **kwargs)

    def _bounded(self, what: str, fn: Callable[..., T], *args: Any,
                 via: CallPath | None = None, **kwargs: Any) -> T:
        """One call, ``what`` naming it, as this mode makes it."""
        raise NotImplementedError

    def within(self, timeout: float) -> NeutronApi:
        """Calls over the same transport (session, token) in the caller's
        own thread, with ``timeout`` per request (see the module)."""
        return Direct(self.transport, timeout)

    def _get_ports(self, params: Mapping[str, str | list[str]]
                   ) -> list[Port]:
        """Every port matching ``params``, page by page (``limit`` and
        ``marker``, as Neutron paginates, or as its ``pagination_max_limit``
        makes it): each page one bounded call, a beat between pages."""
        ports: list[Port] = []
        query: dict[str, str | list[str]] = dict(params, limit=str(PAGE_SIZE))
        restarts = 0
        for _ in range(MAX_PAGES):
            try:
                data = self._bounded("Neutron GET /v2.0/ports", self._call,
                                     "GET", "/v2.0/ports", params=query)
            except OpenStackRefused as exc:
                # The marker port was deleted between two pages (a pod
                # deleted meanwhile): Neutron answers 404. Start again.
                if exc.status != 404 or "marker" not in query or \
                        restarts >= MAX_RESTARTS:
                    raise
                restarts += 1
                ports, query = [], dict(params, limit=str(PAGE_SIZE))
                continue
            items = data.get("ports") if data else None
            if not isinstance(items, list):
                raise OpenStackUnavailable("Neutron GET /v2.0/ports: no port list")
            ports += [decode_port(p) for p in items]
            links = data.get("ports_links") if data else None
            more = isinstance(links, list) and any(
                isinstance(link, dict) and link.get("rel") == "next"
                for link in links)
            if not more or not items:
                return ports
            query["marker"] = ports[-1].id
        raise OpenStackUnavailable(f"Neutron GET /v2.0/ports: more than "
                                   f"{MAX_PAGES} pages")

    @staticmethod
    def _scope(network_id: str, tag: str, project_id: str = "",
               device_owner: str = DEVICE_OWNER
               ) -> dict[str, str | list[str]]:
        params: dict[str, str | list[str]] = {"device_owner": device_owner}
        for key, value in (("network_id", network_id), ("tags", tag),
                           ("project_id", project_id)):
            if value:
                params[key] = value
        return params

    def ports_of(self, device_id: str, *, network_id: str = "",
                 tag: str = "") -> list[Port]:
        """The controller's ports for one device (pod UID), oldest first:
        filtered by Neutron on device_id, device_owner and, when given, the
        network and the cluster tag."""
        params = self._scope(network_id, tag)
        params["device_id"] = device_id
        ports = self._get_ports(params)
        return sorted(ports, key=lambda p: (p.created_at, p.id))

    def ports_of_devices(self, device_ids: Sequence[str], *,
                         network_id: str) -> list[Port]:
        """The ports of several devices (pod UIDs) on the network, oldest
        first, whatever their tags: one list per :data:`DEVICES_PER_LIST`
        (Neutron ORs a repeated filter)."""
        ports: list[Port] = []
        ids = list(dict.fromkeys(device_ids))
        for i in range(0, len(ids), DEVICES_PER_LIST):
            params = self._scope(network_id, "")
            params["device_id"] = ids[i:i + DEVICES_PER_LIST]
            ports += self._get_ports(params)
        return sorted(ports, key=lambda p: (p.created_at, p.id))

    def owned_ports(self, *, network_id: str = "", tag: str = "",
                    project_id: str = "",
                    device_owner: str = DEVICE_OWNER) -> list[Port]:
        """The controller's ports (filtered by Neutron, see the module);
        ``device_owner`` another family of its own (the nodes' canaries)."""
        return self._get_ports(self._scope(network_id, tag, project_id,
                                           device_owner))

    def untagged_ports(self, *, network_id: str, tag: str,
                       project_id: str = "",
                       device_owner: str = DEVICE_OWNER) -> list[Port]:
        """The ports on the network, in the project, with the controller's
        ``device_owner`` (or another of its families) that lack ``tag``
        (``not-tags``): where one whose tag call was lost is found again
        (by its name, see :func:`~.wire.named_ours`)."""
        params = self._scope(network_id, "", project_id, device_owner)
        params["not-tags"] = tag
        return self._get_ports(params)

    def network(self, network_id: str) -> Network:
        """The network: its project (whose members may choose a port's
        MAC) and subnets; :class:`~.wire.NetworkMissing` if it is gone."""
        data = self._bounded("Neutron GET network", self._call, "GET",
                             f"/v2.0/networks/{network_id}")
        try:
            net = data["network"]
            return Network(id=str(net["id"]),
                           project_id=str(net.get("project_id") or ""),
                           subnets=tuple(str(s) for s in
                                         net.get("subnets") or ()))
        except (KeyError, TypeError, AttributeError) as exc:
            raise OpenStackUnavailable(f"Neutron answered a malformed "
                                       f"network: {exc!r}") from exc

    def extension(self, alias: str) -> bool:
        """Whether Neutron has the API extension ``alias`` (``GET
        /v2.0/extensions/{alias}``: 200, or 404)."""
        try:
            self._bounded("Neutron GET extension", self._call, "GET",
                          f"/v2.0/extensions/{alias}")
        except OpenStackRefused as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def set_tags(self, port_id: str, tags: Sequence[str]) -> list[str]:
        """Replace the port's tags (``PUT /v2.0/ports/{id}/tags``): the
        only way to tag a port where Neutron drops a create's tags."""
        what = f"Neutron PUT port {port_id} tags"
        data = self._bounded(what, self._call, "PUT",
                             f"/v2.0/ports/{port_id}/tags",
                             json={"tags": list(tags)})
        got = data.get("tags") if data else None
        if not isinstance(got, list):
            raise OpenStackUnavailable(f"{what}: no tags")
        return [str(t) for t in got]

    def port(self, port_id: str) -> Port | None:
        """One port by id, whatever its tags (None: Neutron says 404)."""
        try:
            data = self._bounded("Neutron GET port", self._call, "GET",
                                 f"/v2.0/ports/{port_id}")
        except OpenStackRefused as exc:
            if exc.status == 404:
                return None
            raise
        if not data or not isinstance(data.get("port"), dict):
            raise OpenStackUnavailable("Neutron GET port: no port")
        return decode_port(data["port"])

    @staticmethod
    def _port_body(network_id: str, subnet_id: str, name: str,
                   device_id: str, tags: Sequence[str], host: str = "",
                   ip: str = "", mac: str = "",
                   device_owner: str = DEVICE_OWNER,
                   security_groups: Sequence[str] | None = None
                   ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "network_id": network_id, "name": name, "device_id": device_id,
            "device_owner": device_owner, "admin_state_up": True}
        if security_groups is not None:
            body["security_groups"] = list(security_groups)
        if tags:
            body["tags"] = list(tags)
        if host:
            body["binding:host_id"] = host
        if subnet_id or ip:
            fixed: dict[str, str] = {"subnet_id": subnet_id} if subnet_id else {}
            if ip:
                fixed["ip_address"] = ip
            body["fixed_ips"] = [fixed]
        if mac:
            body["mac_address"] = mac
        return body

    def create_port(self, *, network_id: str, subnet_id: str, name: str,
                    device_id: str, tags: Sequence[str] = (), host: str = "",
                    ip: str = "", mac: str = "",
                    device_owner: str = DEVICE_OWNER,
                    security_groups: Sequence[str] | None = None) -> Port:
        """One port; ``ip`` and ``mac``, when given, are asked for (a
        vanished port made again as it was); ``device_owner`` as for
        :meth:`owned_ports`; ``security_groups`` None: the project's
        default group, as Neutron gives it."""
        body = self._port_body(network_id, subnet_id, name, device_id, tags,
                               host, ip, mac, device_owner, security_groups)
        data = self._bounded("Neutron POST /v2.0/ports", self._call, "POST",
                             "/v2.0/ports", ok=(201,), json={"port": body})
        if not data or not isinstance(data.get("port"), dict):
            raise OpenStackUnavailable("Neutron POST /v2.0/ports: no port")
        return decode_port(data["port"])

    def create_ports(self, *, network_id: str, subnet_id: str,
                     devices: Sequence[tuple[str, str]],
                     tags: Sequence[str] = (),
                     hosts: Mapping[str, str] | None = None,
                     macs: Mapping[str, str] | None = None,
                     groups: Mapping[str, Sequence[str]] | None = None
                     ) -> list[Port]:
        """Neutron's bulk create: one POST with ``{"ports": [...]}`` for
        ``devices`` ((name, device_id) pairs, ``hosts``: device_id -> the
        node to bind to, ``macs``: device_id -> the MAC to ask for,
        ``groups``: device_id -> its security groups, absent: the
        project's default group; Neutron takes them per port in a bulk);
        the ports come back in request order. All or nothing: a refusal
        creates none. The tags asked for are not checked here: a Neutron
        without ML2's ``tag_ports_during_bulk_creation`` drops them
        (:mod:`.making` tags such ports after the create)."""
        hosts, macs, groups = hosts or {}, macs or {}, groups or {}
        body = [self._port_body(network_id, subnet_id, name, device, tags,
                                hosts.get(device, ""), mac=macs.get(device, ""),
                                security_groups=groups.get(device))
                for name, device in devices]
        what = f"Neutron POST /v2.0/ports (bulk of {len(body)})"
        data = self._bounded(what, self._call, "POST", "/v2.0/ports",
                             ok=(201,), json={"ports": body})
        items = data.get("ports") if data else None
        if not isinstance(items, list) or len(items) != len(body):
            raise OpenStackUnavailable(f"{what}: not one port per request")
        ports = [decode_port(p) for p in items]
        if [p.device_id for p in ports] != [d for _, d in devices]:
            raise OpenStackUnavailable(f"{what}: ports not in request order")
        return ports

    def update_port(self, port_id: str, *, device_id: str, name: str,
                    host: str = "",
                    security_groups: Sequence[str] | None = None) -> Port:
        """Give port ``port_id`` to ``device_id`` under ``name`` (and bind
        it to ``host`` when given, give it ``security_groups`` when not
        None): one PUT, checked applied."""
        what = f"Neutron PUT port {port_id}"
        body: dict[str, Any] = {"device_id": device_id, "name": name}
        if host:
            body["binding:host_id"] = host
        if security_groups is not None:
            body["security_groups"] = list(security_groups)
        data = self._bounded(what, self._call, "PUT", f"/v2.0/ports/{port_id}",
                             json={"port": body})
        if not data or not isinstance(data.get("port"), dict):
            raise OpenStackUnavailable(f"{what}: no port")
        port = decode_port(data["port"])
        if port.device_id != device_id or (
                security_groups is not None and
                set(port.security_groups) != set(security_groups)):
            raise OpenStackUnavailable(f"{what}: the update was not applied")
        return port

    def delete_port(self, port_id: str) -> bool:
        """Delete a port; False if it was already gone."""
        try:
            self._bounded("Neutron DELETE port", self._call, "DELETE",
                          f"/v2.0/ports/{port_id}", ok=(204,))
        except OpenStackRefused as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def subnet(self, subnet_id: str) -> Subnet:
        data = self._bounded("Neutron GET subnet", self._call, "GET",
                             f"/v2.0/subnets/{subnet_id}")
        return _subnet((data or {}).get("subnet"))

    def subnets(self) -> list[Subnet]:
        """The IPv4 subnets the caller sees (its project's and shared
        ones), page by page as Neutron pages them: where a Service's
        members may be."""
        query: dict[str, str | list[str]] = {
            "ip_version": "4", "fields": ["id", "cidr", "gateway_ip"],
            "limit": str(PAGE_SIZE)}
        out: list[Subnet] = []
        for _ in range(MAX_PAGES):
            data = self._bounded("Neutron GET /v2.0/subnets", self._call,
                                 "GET", "/v2.0/subnets", params=query)
            items = data.get("subnets") if data else None
            if not isinstance(items, list):
                raise OpenStackUnavailable("Neutron GET /v2.0/subnets: no "
                                           "subnet list")
            out += [_subnet(s) for s in items]
            more = any(isinstance(link, dict) and link.get("rel") == "next"
                       for link in data.get("subnets_links") or ())
            if not more or not items:
                return out
            query["marker"] = out[-1].id
        raise OpenStackUnavailable(f"Neutron GET /v2.0/subnets: more than "
                                   f"{MAX_PAGES} pages")

    def port_quota(self, project_id: str) -> PortQuota:
        data = self._bounded("Neutron GET quota", self._call, "GET",
                             f"/v2.0/quotas/{project_id}/details")
        try:
            port = (data.get("quota") or {}).get("port") or {}
            return PortQuota(limit=int(port.get("limit", -1)),
                             used=int(port.get("used", 0)),
                             reserved=int(port.get("reserved", 0)))
        except (TypeError, ValueError, AttributeError) as exc:
            raise OpenStackUnavailable(f"Neutron answered a malformed "
                                       f"quota: {exc!r}") from exc


def _subnet(sub: Any) -> Subnet:
    """A subnet of Neutron's JSON; a malformed one is an outage."""
    try:
        gateway = sub.get("gateway_ip")
        return Subnet(id=str(sub["id"]),
                      cidr=ipaddress.IPv4Network(sub["cidr"]),
                      gateway=ipaddress.IPv4Address(gateway) if gateway
                      else None)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise OpenStackUnavailable(f"Neutron answered a malformed "
                                   f"subnet: {exc!r}") from exc


class Direct(NeutronApi):
    """The calls made in the caller's own thread, each bounded by the
    request timeout alone (see the module)."""

    def _bounded(self, what: str, fn: Callable[..., T], *args: Any,
                 via: CallPath | None = None, **kwargs: Any) -> T:
        return fn(*args, **kwargs)
