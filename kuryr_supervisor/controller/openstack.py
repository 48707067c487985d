"""The OpenStack adapter: the only module that imports keystoneauth1.

Keystone and Neutron are reached through one keystoneauth session built from
the ``[neutron]`` options (as Kuryr does); the Neutron endpoint comes from the
token's service catalog (service type ``network``). Answers are decoded into
the few fields the controller uses.

Tokens: keystoneauth caches the token and authenticates again only when it
expires within ``token_renew_margin`` seconds, so neither a request nor a
readiness check costs a Keystone round trip while the token is fresh, and a
token is renewed before it expires, not after a 401.

Bounds: the session's timeout is ``[controller] openstack_timeout`` (or
``[neutron] timeout`` when that is shorter), so every socket operation of a
Keystone token request, a version discovery and a Neutron call is bounded;
and every public call runs in the adapter's own thread under a whole-call
deadline (``deadline``, default three timeouts: discovery, token, call)
while the caller's thread keeps calling ``beat`` (a handler's or the
HealthManager's heartbeat), so a hung Keystone never makes a worker stale.
An answer that is not the JSON expected (a 200 of garbage) is an outage of
the dependency, like a timeout, never a fault of the caller.

Scope: the controller's ports are those with ``device_owner`` DEVICE_OWNER,
the cluster's tag (:func:`cluster_tag`), on the pod network, in the
project; every lookup passes these as Neutron filters, so another cluster's
ports sharing the project are never seen, adopted or deleted.

Invariants: every request has a timeout; every failure leaves this module as
:class:`OpenStackUnavailable` (Keystone or Neutron unreachable, 5xx, token
refused: an outage the controller waits out, not ready) or
:class:`OpenStackRefused` (4xx: this request cannot succeed as it is), with
:class:`QuotaExceeded` for Neutron's 409 ``OverQuota``; chained to the cause.
"""
from __future__ import annotations

import concurrent.futures
import ipaddress
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from oslo_config import cfg

from kuryr_supervisor.conf import controller as controller_conf
from kuryr_supervisor.controller.neutronwire import (  # noqa: F401 - re-exported
    DEVICE_OWNER,
    TAG_PREFIX,
    OpenStackError,
    OpenStackRefused,
    OpenStackUnavailable,
    Port,
    PortQuota,
    QuotaExceeded,
    Subnet,
    Token,
    _port,
    cluster_tag,
)

LOG = logging.getLogger(__name__)

#: How often a caller waiting on a call beats (seconds).
_BEAT_EVERY = 0.2
#: Ports per page of a port list: one page stays well under a second of
#: Neutron's time and a few MiB of JSON; 10,000 ports are ten pages.
PAGE_SIZE = 1000
#: A list of more pages than this is a loop, not a port list.
MAX_PAGES = 10_000

T = TypeVar("T")


class OpenStack:
    """The Keystone and Neutron calls the controller makes."""

    def __init__(self, session: Any, auth: Any, *, timeout: float = 5.0,
                 clock: Callable[[], float] = time.time,
                 deadline: float | None = None) -> None:
        from keystoneauth1 import adapter
        self._session = session
        self._auth = auth
        self._neutron = adapter.Adapter(session=session, auth=auth,
                                        service_type="network")
        self.timeout = timeout
        #: Whole-call bound (discovery + token + request).
        self.deadline = deadline if deadline is not None else 3 * timeout
        #: Called while a call waits; a worker sets its heartbeat here.
        self.beat: Callable[[], None] = lambda: None
        self._clock = clock
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="openstack")
        self._hung: concurrent.futures.Future[Any] | None = None

    def _bounded(self, what: str, fn: Callable[..., T], *args: Any,
                 **kwargs: Any) -> T:
        """``fn`` in the adapter's thread, within ``deadline``, beating.
        One thread: while a call that timed out still hangs there, later
        calls fail at once (the dependency is known to hang) instead of
        queueing behind it."""
        if self._hung is not None and not self._hung.done():
            raise OpenStackUnavailable(f"{what}: an earlier call still has "
                                       f"no answer")
        self._hung = None
        future = self._pool.submit(fn, *args, **kwargs)
        end = time.monotonic() + self.deadline
        while True:
            self.beat()
            left = end - time.monotonic()
            try:
                return future.result(timeout=max(0.0, min(_BEAT_EVERY, left)))
            except concurrent.futures.TimeoutError:
                if left <= _BEAT_EVERY:
                    self._hung = future
                    raise OpenStackUnavailable(
                        f"{what}: no answer within {self.deadline:g}s") from None

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> OpenStack:
        from keystoneauth1 import exceptions as ks_exc
        from keystoneauth1 import loading as ks_loading
        group = controller_conf.NEUTRON_GROUP
        controller_conf.register_neutron(conf)
        try:
            auth: Any = ks_loading.load_auth_from_conf_options(conf, group)
        except ks_exc.ClientException as exc:
            raise OpenStackRefused(f"[neutron] auth options: {exc}") from exc
        if auth is None:
            raise OpenStackRefused("[neutron] auth_type is not set")
        # keystoneauth renews a cached token this long before it expires.
        auth.MIN_TOKEN_LIFE_SECONDS = int(conf.controller.token_renew_margin)
        timeout = float(conf.controller.openstack_timeout)
        if conf[group].timeout:
            timeout = min(timeout, float(conf[group].timeout))
        # The session's timeout bounds token requests and discovery too.
        session = ks_loading.load_session_from_conf_options(
            conf, group, auth=auth, timeout=timeout)
        return cls(session, auth, timeout=timeout)

    # -- transport -----------------------------------------------------------
    def _call(self, method: str, path: str, *, ok: tuple[int, ...] = (200,),
              **kwargs: Any) -> Any:
        from keystoneauth1 import exceptions as ks_exc
        what = f"Neutron {method} {path}"
        try:
            resp = self._neutron.request(path, method, raise_exc=False,
                                         timeout=self.timeout, **kwargs)
        except ks_exc.Unauthorized as exc:
            raise OpenStackUnavailable(f"Keystone refused: {exc}", 401) from exc
        except ks_exc.ClientException as exc:
            raise OpenStackUnavailable(self._failure(what, exc)) from exc
        status = resp.status_code
        if status in ok:
            if not resp.content:
                return None
            try:
                data = resp.json()
            except ValueError as exc:
                raise OpenStackUnavailable(
                    f"{what}: HTTP {status} with a body that is not JSON: "
                    f"{resp.text[:80]!r}", status) from exc
            if not isinstance(data, dict):
                raise OpenStackUnavailable(f"{what}: HTTP {status} with a "
                                           f"body that is not an object")
            return data
        detail = resp.text[:300]
        if 200 <= status < 300:
            # A success Neutron never sends for this call: not an answer.
            raise OpenStackUnavailable(f"{what}: unexpected HTTP {status} "
                                       f"{detail[:80]!r}", status)
        if status == 409 and "OverQuota" in detail:
            raise QuotaExceeded(f"{what}: port quota exceeded", status)
        if status >= 500 or status in (401, 408, 429):
            raise OpenStackUnavailable(f"{what}: HTTP {status} {detail}", status)
        raise OpenStackRefused(f"{what}: HTTP {status} {detail}", status)

    def _failure(self, what: str, exc: Exception) -> str:
        """One phrase for a hung dependency, whichever bound saw it first:
        the session's per-request timeout or the whole-call deadline."""
        from keystoneauth1 import exceptions as ks_exc
        if isinstance(exc, ks_exc.ConnectTimeout):
            return f"{what}: no answer within {self.timeout:g}s"
        return f"{what}: {exc}"

    # -- Keystone ---------------------------------------------------------------
    def token(self) -> Token:
        """The current token, authenticating only if there is none or it
        expires within the renewal margin."""
        return self._bounded("Keystone token", self._token)

    def _token(self) -> Token:
        from keystoneauth1 import exceptions as ks_exc
        try:
            access = self._auth.get_access(self._session)
        except ks_exc.ClientException as exc:
            raise OpenStackUnavailable(self._failure("Keystone", exc)) from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise OpenStackUnavailable(f"Keystone answered garbage: "
                                       f"{exc!r}") from exc
        expires = access.expires
        return Token(expires_at=expires.timestamp() if expires else 0.0,
                     project_id=access.project_id or "")

    # -- Neutron ----------------------------------------------------------------
    def _get_ports(self, params: dict[str, str]) -> list[Port]:
        """Every port matching ``params``, page by page (``limit`` and
        ``marker``, as Neutron paginates, or as its ``pagination_max_limit``
        makes it): each page one bounded call, a beat between pages."""
        ports: list[Port] = []
        query = dict(params, limit=str(PAGE_SIZE))
        for _ in range(MAX_PAGES):
            data = self._bounded("Neutron GET /v2.0/ports", self._call, "GET",
                                 "/v2.0/ports", params=query)
            items = data.get("ports") if data else None
            if not isinstance(items, list):
                raise OpenStackUnavailable("Neutron GET /v2.0/ports: no port list")
            ports += [_port(p) for p in items]
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
    def _scope(network_id: str, tag: str, project_id: str = ""
               ) -> dict[str, str]:
        params = {"device_owner": DEVICE_OWNER}
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

    def owned_ports(self, *, network_id: str = "", tag: str = "",
                    project_id: str = "") -> list[Port]:
        """The controller's ports (filtered by Neutron, see the module)."""
        return self._get_ports(self._scope(network_id, tag, project_id))

    @staticmethod
    def _port_body(network_id: str, subnet_id: str, name: str,
                   device_id: str, tags: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "network_id": network_id, "name": name, "device_id": device_id,
            "device_owner": DEVICE_OWNER, "admin_state_up": True}
        if tags:
            body["tags"] = list(tags)
        if subnet_id:
            body["fixed_ips"] = [{"subnet_id": subnet_id}]
        return body

    def create_port(self, *, network_id: str, subnet_id: str, name: str,
                    device_id: str, tags: Sequence[str] = ()) -> Port:
        body = self._port_body(network_id, subnet_id, name, device_id, tags)
        data = self._bounded("Neutron POST /v2.0/ports", self._call, "POST",
                             "/v2.0/ports", ok=(201,), json={"port": body})
        if not data or not isinstance(data.get("port"), dict):
            raise OpenStackUnavailable("Neutron POST /v2.0/ports: no port")
        return _port(data["port"])

    def create_ports(self, *, network_id: str, subnet_id: str,
                     devices: Sequence[tuple[str, str]],
                     tags: Sequence[str] = ()) -> list[Port]:
        """Neutron's bulk create: one POST with ``{"ports": [...]}`` for
        ``devices`` ((name, device_id) pairs); the ports come back in
        request order. All or nothing: a refusal creates none."""
        body = [self._port_body(network_id, subnet_id, name, device, tags)
                for name, device in devices]
        what = f"Neutron POST /v2.0/ports (bulk of {len(body)})"
        data = self._bounded(what, self._call, "POST", "/v2.0/ports",
                             ok=(201,), json={"ports": body})
        items = data.get("ports") if data else None
        if not isinstance(items, list) or len(items) != len(body):
            raise OpenStackUnavailable(f"{what}: not one port per request")
        ports = [_port(p) for p in items]
        if [p.device_id for p in ports] != [d for _, d in devices]:
            raise OpenStackUnavailable(f"{what}: ports not in request order")
        return ports

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
        try:
            sub = data["subnet"]
            gateway = sub.get("gateway_ip")
            return Subnet(id=str(sub["id"]),
                          cidr=ipaddress.IPv4Network(sub["cidr"]),
                          gateway=ipaddress.IPv4Address(gateway) if gateway
                          else None)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OpenStackUnavailable(f"Neutron answered a malformed "
                                       f"subnet: {exc!r}") from exc

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
