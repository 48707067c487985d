"""The OpenStack adapter: the only module that imports keystoneauth1.

Keystone and Neutron are reached through one keystoneauth session built from
the ``[neutron]`` options (as Kuryr does); the Neutron endpoint comes from the
token's service catalog (service type ``network``). Answers are decoded into
the few fields the controller uses.

Tokens: keystoneauth caches the token and authenticates again only when it
expires within ``token_renew_margin`` seconds, so neither a request nor a
readiness check costs a Keystone round trip while the token is fresh, and a
token is renewed before it expires, not after a 401.

Invariants: every request has a timeout; every failure leaves this module as
:class:`OpenStackUnavailable` (Keystone or Neutron unreachable, 5xx, token
refused: an outage the controller waits out, not ready) or
:class:`OpenStackRefused` (4xx: this request cannot succeed as it is), with
:class:`QuotaExceeded` for Neutron's 409 ``OverQuota``; chained to the cause.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from oslo_config import cfg

from kuryr_supervisor.conf import controller as controller_conf

LOG = logging.getLogger(__name__)

#: Ports the controller owns carry this device_owner; device_id is the pod UID.
DEVICE_OWNER = "compute:kuryr"


class OpenStackError(Exception):
    def __init__(self, msg: str, status: int = 0) -> None:
        super().__init__(msg)
        self.status = status


class OpenStackUnavailable(OpenStackError):
    """Unreachable, timed out, 5xx, or authentication failed: wait it out."""


class OpenStackRefused(OpenStackError):
    """A 4xx answer: retrying the same request cannot help."""


class QuotaExceeded(OpenStackRefused):
    """Neutron refused a port: the project's port quota is used up."""


@dataclasses.dataclass(frozen=True)
class Port:
    id: str
    mac: str
    device_id: str
    ip: ipaddress.IPv4Address | None
    subnet_id: str
    created_at: str


@dataclasses.dataclass(frozen=True)
class Subnet:
    id: str
    cidr: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address | None


@dataclasses.dataclass(frozen=True)
class Token:
    expires_at: float        # epoch seconds
    project_id: str


@dataclasses.dataclass(frozen=True)
class PortQuota:
    limit: int               # -1: unlimited
    used: int
    reserved: int

    @property
    def left(self) -> int | None:
        """Ports that can still be created; None when unlimited."""
        if self.limit < 0:
            return None
        return max(0, self.limit - self.used - self.reserved)


def _port(obj: Mapping[str, Any]) -> Port:
    ips = [ip for ip in obj.get("fixed_ips") or []
           if ipaddress.ip_address(ip.get("ip_address", "::")).version == 4]
    first = ips[0] if ips else {}
    return Port(id=str(obj["id"]), mac=str(obj.get("mac_address", "")),
                device_id=str(obj.get("device_id", "")),
                ip=ipaddress.IPv4Address(first["ip_address"]) if first else None,
                subnet_id=str(first.get("subnet_id", "")),
                created_at=str(obj.get("created_at") or ""))


class OpenStack:
    """The Keystone and Neutron calls the controller makes."""

    def __init__(self, session: Any, auth: Any, *, timeout: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        from keystoneauth1 import adapter
        self._session = session
        self._auth = auth
        self._neutron = adapter.Adapter(session=session, auth=auth,
                                        service_type="network")
        self.timeout = timeout
        self._clock = clock

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
        session = ks_loading.load_session_from_conf_options(conf, group,
                                                            auth=auth)
        return cls(session, auth, timeout=conf.controller.openstack_timeout)

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
            raise OpenStackUnavailable(f"{what}: {exc}") from exc
        status = resp.status_code
        if status in ok:
            return resp.json() if resp.content else None
        detail = resp.text[:300]
        if status == 409 and "OverQuota" in detail:
            raise QuotaExceeded(f"{what}: port quota exceeded", status)
        if status >= 500 or status in (401, 408, 429):
            raise OpenStackUnavailable(f"{what}: HTTP {status} {detail}", status)
        raise OpenStackRefused(f"{what}: HTTP {status} {detail}", status)

    # -- Keystone ---------------------------------------------------------------
    def token(self) -> Token:
        """The current token, authenticating only if there is none or it
        expires within the renewal margin."""
        from keystoneauth1 import exceptions as ks_exc
        try:
            access = self._auth.get_access(self._session)
        except ks_exc.ClientException as exc:
            raise OpenStackUnavailable(f"Keystone: {exc}") from exc
        expires = access.expires
        return Token(expires_at=expires.timestamp() if expires else 0.0,
                     project_id=access.project_id or "")

    # -- Neutron ----------------------------------------------------------------
    def ports_of(self, device_id: str) -> list[Port]:
        """The controller's ports for one device (pod UID), oldest first."""
        data = self._call("GET", "/v2.0/ports", params={
            "device_id": device_id, "device_owner": DEVICE_OWNER})
        ports = [_port(p) for p in data.get("ports") or []]
        return sorted(ports, key=lambda p: (p.created_at, p.id))

    def owned_ports(self) -> list[Port]:
        data = self._call("GET", "/v2.0/ports",
                          params={"device_owner": DEVICE_OWNER})
        return [_port(p) for p in data.get("ports") or []]

    def create_port(self, *, network_id: str, subnet_id: str, name: str,
                    device_id: str) -> Port:
        body: dict[str, Any] = {
            "network_id": network_id, "name": name, "device_id": device_id,
            "device_owner": DEVICE_OWNER, "admin_state_up": True}
        if subnet_id:
            body["fixed_ips"] = [{"subnet_id": subnet_id}]
        data = self._call("POST", "/v2.0/ports", ok=(201,),
                          json={"port": body})
        return _port(data["port"])

    def delete_port(self, port_id: str) -> bool:
        """Delete a port; False if it was already gone."""
        try:
            self._call("DELETE", f"/v2.0/ports/{port_id}", ok=(204,))
        except OpenStackRefused as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def subnet(self, subnet_id: str) -> Subnet:
        data = self._call("GET", f"/v2.0/subnets/{subnet_id}")["subnet"]
        gateway = data.get("gateway_ip")
        return Subnet(id=str(data["id"]),
                      cidr=ipaddress.IPv4Network(data["cidr"]),
                      gateway=ipaddress.IPv4Address(gateway) if gateway else None)

    def port_quota(self, project_id: str) -> PortQuota:
        data = self._call("GET", f"/v2.0/quotas/{project_id}/details")
        port = (data.get("quota") or {}).get("port") or {}
        return PortQuota(limit=int(port.get("limit", -1)),
                         used=int(port.get("used", 0)),
                         reserved=int(port.get("reserved", 0)))
