"""The OpenStack adapter: the only module that imports keystoneauth1.

Keystone and Neutron are reached through one keystoneauth session built from
the ``[neutron]`` options (as Kuryr does); the Neutron endpoint comes from the
token's service catalog (service type ``network``; ``region_name``,
``valid_interfaces`` and ``service_name`` choose among its endpoints) unless
``endpoint_override`` names it. Answers are decoded into
the few fields the controller uses.

Tokens: keystoneauth caches the token and authenticates again only when it
expires within the renewal margin, so neither a request nor a readiness
check costs a Keystone round trip while the token is fresh, and a token is
renewed before it expires, not after a 401. Every login goes through
:class:`~.login.LoginPolicy`: the margin is ``token_renew_margin``
but never more than half the token's real lifetime, and refused logins
back off. A call that could not get a token fails as
:class:`KeystoneUnavailable`, whichever service it was for.

Bounds: the session's timeout is the request timeout
(:func:`.timeouts.request_timeout`), so every socket operation of a
Keystone token request, a version discovery and a Neutron call is bounded;
and every public call runs under a whole-call deadline (``deadline``,
default :func:`.timeouts.call_deadline`) while the caller beats
(:mod:`.deadline`), Keystone's calls and Neutron's on call paths of their
own, so one hanging never fails the other's check. An answer that is not the JSON expected (a 200 of
garbage) is an outage of the dependency, like a timeout, never a fault of
the caller.

Layout: this module holds the session, the token and the transport
(``_call``); the Neutron calls and their port scope are
:mod:`.neutron`'s, the errors and records :mod:`.wire`'s (all
importable from here, as callers use them).

Invariants: every request has a timeout; every failure leaves this module as
:class:`OpenStackUnavailable` (Keystone or Neutron unreachable, 5xx, token
refused: an outage the controller waits out, not ready) or
:class:`OpenStackRefused` (4xx: this request cannot succeed as it is), with
:class:`QuotaExceeded` for Neutron's 409 ``OverQuota``; chained to the cause.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from oslo_config import cfg

from kuryr_supervisor import useragent
from kuryr_supervisor.conf import controller as controller_conf
from kuryr_supervisor.controller.openstack import timeouts
from kuryr_supervisor.controller.openstack.deadline import CallPath
from kuryr_supervisor.controller.openstack.login import (  # noqa: F401 - re-exported
    KeystoneUnavailable,
    LoginPolicy,
)
from kuryr_supervisor.controller.openstack.neutron import NeutronApi
from kuryr_supervisor.controller.openstack.wire import (  # noqa: F401 - re-exported
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
    cluster_tag,
)
from kuryr_supervisor.kubernetes import fence
from kuryr_supervisor.kubernetes.config import node_name

LOG = logging.getLogger(__name__)

#: Connections kept open to each of Keystone and Neutron (requests' own
#: default, 10, is fewer than the controller's concurrent calls).
CONNECTIONS = 32


class OpenStack(NeutronApi):
    """The Keystone and Neutron calls the controller makes."""

    def __init__(self, session: Any, auth: Any, *, timeout: float = 5.0,
                 clock: Callable[[], float] = time.time,
                 deadline: float | None = None,
                 login: LoginPolicy | None = None,
                 endpoint: Mapping[str, Any] | None = None) -> None:
        from keystoneauth1 import adapter
        super().__init__(deadline if deadline is not None
                         else timeouts.call_deadline(timeout),
                         thread_name="neutron")
        self._session = session
        self._auth = auth
        where = {"service_type": "network", **(endpoint or {})}
        self._neutron = adapter.Adapter(session=session, auth=auth, **where)
        self.timeout = timeout
        self._clock = clock
        self._keystone = CallPath("keystone", KeystoneUnavailable)
        self.login = login or LoginPolicy(
            float(getattr(auth, "MIN_TOKEN_LIFE_SECONDS", 120)))
        # Every login, whichever call needs it, passes the policy.
        self._get_auth_ref = auth.get_auth_ref
        auth.get_auth_ref = self._log_in
        auth.MIN_TOKEN_LIFE_SECONDS = self.login.margin

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  deadline: float | None = None) -> OpenStack:
        """The adapter ``[neutron]`` describes; ``deadline``: the whole-call
        deadline when not the default (the readiness checks')."""
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
        timeout = timeouts.request_timeout(conf)
        # The session's timeout bounds token requests and discovery too;
        # its User-Agent names this replica on every request it sends
        # (Keystone's logins, Neutron's calls; the CNI role's checks too).
        role = str(conf.role) if "role" in conf else "controller"
        node = node_name(conf) if role != "controller" else ""
        session = ks_loading.load_session_from_conf_options(
            conf, group, auth=auth, timeout=timeout,
            user_agent=useragent.for_role(role, node))
        # Concurrent callers (bulk creates in flight, pool claims) each
        # keep their connection instead of opening and dropping one each;
        # each write to one checks the write fence (see sendfence).
        from kuryr_supervisor.controller.openstack import sendfence
        for scheme in ("https://", "http://"):
            session.mount(scheme, sendfence.FencedAdapter(
                pool_maxsize=CONNECTIONS))
        return cls(session, auth, timeout=timeout, deadline=deadline,
                   login=LoginPolicy(
            float(conf.controller.token_renew_margin)),
            endpoint=_endpoint(conf[group]))

    # -- transport -----------------------------------------------------------
    def _call(self, method: str, path: str, *, ok: tuple[int, ...] = (200,),
              **kwargs: Any) -> Any:
        from keystoneauth1 import exceptions as ks_exc

        from kuryr_supervisor.controller.openstack import sendfence
        what = f"Neutron {method} {path}"
        writes = method != "GET"
        if writes:
            fence.check(what)       # a replica that lost its lease: exits
        try:
            with sendfence.write() if writes else contextlib.nullcontext():
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
        return self._bounded("Keystone token", self._token, via=self._keystone)

    def _token(self) -> Token:
        from keystoneauth1 import exceptions as ks_exc
        try:
            access = self._auth.get_access(self._session)
        except ks_exc.ClientException as exc:
            raise KeystoneUnavailable(self._failure("Keystone", exc)) from exc
        expires = access.expires
        return Token(expires_at=expires.timestamp() if expires else 0.0,
                     project_id=access.project_id or "")

    def _log_in(self, session: Any, **kwargs: Any) -> Any:
        """keystoneauth's ``get_auth_ref`` under the login policy: backed
        off after refusals, the renewal margin set from the new token's
        lifetime; every failure leaves as :class:`KeystoneUnavailable`."""
        from keystoneauth1 import exceptions as ks_exc
        self.login.may_log_in()
        try:
            access = self._get_auth_ref(session, **kwargs)
            issued, expires = access.issued, access.expires
        except ks_exc.HttpError as exc:
            if 400 <= (exc.http_status or 0) < 500:
                self.login.refused(f"HTTP {exc.http_status}")
                raise KeystoneUnavailable(f"Keystone refused the login: {exc}",
                                          exc.http_status) from exc
            raise KeystoneUnavailable(self._failure("Keystone", exc)) from exc
        except ks_exc.ClientException as exc:
            raise KeystoneUnavailable(self._failure("Keystone", exc)) from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KeystoneUnavailable(f"Keystone answered garbage: "
                                      f"{exc!r}") from exc
        self.login.succeeded()
        self._auth.MIN_TOKEN_LIFE_SECONDS = self.login.token_issued(
            issued.timestamp() if issued else None,
            expires.timestamp() if expires else None, self._clock())
        return access


def _endpoint(group: Any) -> dict[str, Any]:
    """Which Neutron endpoint, from ``[neutron]``'s adapter options (the
    catalog's ``network`` service, public interface, any region, unless
    set)."""
    where: dict[str, Any] = {"service_type": group.service_type or "network"}
    if group.service_name:
        where["service_name"] = group.service_name
    if group.valid_interfaces:
        where["interface"] = list(group.valid_interfaces)
    if group.region_name:
        where["region_name"] = group.region_name
    if group.endpoint_override:
        where["endpoint_override"] = group.endpoint_override
    return where
