"""The OpenStack adapter: its keystoneauth sessions, the token, the transport.

Keystone and Neutron (and Octavia, :meth:`OpenStack.octavia`) are reached
through keystoneauth sessions built from the ``[neutron]`` options (as
Kuryr does); the Neutron endpoint comes from the token's service catalog
(service type ``network``; ``region_name``, ``valid_interfaces`` and
``service_name`` choose among its endpoints) unless ``endpoint_override``
names it. Answers are decoded into the few fields the controller uses.

Tokens: keystoneauth caches the token and authenticates again only when it
expires within the renewal margin, so neither a request nor a readiness
check costs a Keystone round trip while the token is fresh, and a token is
renewed before it expires, not after a 401. Every login goes through
:class:`~.login.LoginPolicy`, hooked in as keystoneauth's identity plugin
(:class:`~.keystone.PolicedAuth`): the margin is ``token_renew_margin``
but never more than half the token's real lifetime, and refused logins
back off. A call that could not get a token fails as
:class:`KeystoneUnavailable`, whichever service it was for.

Bounds: the session's timeout is the request timeout
(:func:`.timeouts.request_timeout`), so every socket operation of a
Keystone token request, a version discovery and a Neutron call is bounded;
and every public call runs under a whole-call deadline (``deadline``,
default :func:`.timeouts.call_deadline`) while the caller beats
(:mod:`.deadline`), Keystone's calls and Neutron's on call paths of their
own, so one hanging never fails the other's check. An answer that is not
the JSON expected (a 200 of garbage) is an outage of the dependency, like
a timeout, never a fault of the caller.

Writes: every call that writes asks the adapter's write fence first
(:class:`~kuryr_supervisor.kubernetes.fence.WriteFence`, handed in by
whoever builds the adapter), and, when that fence can close, goes through
a session of its own whose transport checks it again before each socket
write (:mod:`.sendfence`); reads go through an unfenced one. Both share
the token and the version discovery.

Layout: this module holds the sessions, the token and the transport
(:class:`NeutronTransport`, shared by both call modes of :mod:`.neutron`:
the adapter's bounded calls and the caller's-thread ones of ``within``);
the logins are :mod:`.keystone`'s; the Neutron calls and their port scope are
:mod:`.neutron`'s, the errors and records :mod:`.wire`'s (all
importable from here, as callers use them).

Invariants: every request has a timeout; every failure leaves this module as
:class:`OpenStackUnavailable` (Keystone or Neutron unreachable, 5xx, token
refused: an outage the controller waits out, not ready) or
:class:`OpenStackRefused` (4xx: this request cannot succeed as it is), with
:class:`QuotaExceeded` for Neutron's 409 ``OverQuota`` and the other
refusals :func:`~.wire.refined` tells apart (a MAC in use, the network or
subnet missing, a policy that forbids the call); chained to the cause.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from oslo_config import cfg

from kuryr_supervisor import useragent
from kuryr_supervisor.conf import controller as controller_conf
from kuryr_supervisor.controller.openstack import timeouts
from kuryr_supervisor.controller.openstack.deadline import BoundedCalls, CallPath
from kuryr_supervisor.controller.openstack.login import (  # noqa: F401 - re-exported
    KeystoneUnavailable,
    LoginPolicy,
)
from kuryr_supervisor.controller.openstack.neutron import NeutronApi
from kuryr_supervisor.controller.openstack.octavia import Octavia, OctaviaTransport
from kuryr_supervisor.controller.openstack.wire import (  # noqa: F401 - re-exported
    CANARY_OWNER,
    DEVICE_OWNER,
    NODE_OWNER,
    TAG_PREFIX,
    Forbidden,
    MacInUse,
    Network,
    NetworkMissing,
    OpenStackError,
    OpenStackRefused,
    OpenStackUnavailable,
    Port,
    PortQuota,
    QuotaExceeded,
    Subnet,
    SubnetMissing,
    Token,
    cluster_tag,
    refined,
)
from kuryr_supervisor.kubernetes.config import node_name
from kuryr_supervisor.kubernetes.fence import WriteFence

LOG = logging.getLogger(__name__)

#: Connections kept open to each of Keystone and Neutron (requests' own
#: default, 10, is fewer than the controller's concurrent calls).
CONNECTIONS = 32


class NeutronTransport:
    """One Neutron request through keystoneauth: reads through
    ``neutron``, writes through ``writes`` once ``fence`` allows them;
    the answer's JSON object, or an error of the taxonomy (see the
    module)."""

    def __init__(self, neutron: Any, writes: Any, fence: WriteFence) -> None:
        self.neutron, self.writes, self.fence = neutron, writes, fence

    def call(self, method: str, path: str, *, timeout: float,
             ok: tuple[int, ...] = (200,), **kwargs: Any) -> Any:
        from keystoneauth1 import exceptions as ks_exc

        from kuryr_supervisor.controller.openstack.keystone import failure
        what = f"Neutron {method} {path}"
        writes = method != "GET"
        if writes:
            self.fence.check(what)      # a replica that lost its lease: exits
        neutron = self.writes if writes else self.neutron
        try:
            resp = neutron.request(path, method, raise_exc=False,
                                   timeout=timeout, **kwargs)
        except ks_exc.Unauthorized as exc:
            raise OpenStackUnavailable(f"Keystone refused: {exc}", 401) from exc
        except ks_exc.ClientException as exc:
            raise OpenStackUnavailable(failure(what, exc, timeout)) from exc
        return _answer(what, resp, ok)


def _answer(what: str, resp: Any, ok: tuple[int, ...]) -> Any:
    """Neutron's answer ``resp`` to ``what``: its JSON object when its
    status is ``ok``, else the error it means."""
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
    raise refined(OpenStackRefused(f"{what}: HTTP {status} {detail}",
                                   status))


class OpenStack(BoundedCalls, NeutronApi):
    """The Keystone and Neutron calls the controller makes, each bounded
    (:mod:`.deadline`); :meth:`~.neutron.NeutronApi.within` gives the same
    calls in the caller's thread."""

    def __init__(self, session: Any, auth: Any, *, timeout: float = 5.0,
                 deadline: float | None = None,
                 endpoint: Mapping[str, Any] | None = None,
                 fence: WriteFence | None = None,
                 writes: Any = None,
                 beat: Callable[[], None] | None = None) -> None:
        """``session`` (keystoneauth's) carries every request but the
        writes, which go through ``writes`` (by default the same session;
        a fenced one, see :mod:`.sendfence`); ``auth`` is the plugin both
        share (one token: a :class:`~.keystone.PolicedAuth`); ``fence`` is
        asked before every write; ``beat``: the caller's heartbeat, called
        while a call waits."""
        from keystoneauth1 import adapter
        BoundedCalls.__init__(self, deadline if deadline is not None
                              else timeouts.call_deadline(timeout),
                              thread_name="neutron", beat=beat)
        self._session = session
        self._auth = auth
        self._writes = writes
        self._endpoint = dict(endpoint or {})
        self._octavia: Octavia | None = None
        where = {"service_type": "network", **(endpoint or {})}
        reads = adapter.Adapter(session=session, auth=auth, **where)
        self.fence = fence or WriteFence()
        NeutronApi.__init__(self, NeutronTransport(
            reads, reads if writes is None else adapter.Adapter(
                session=writes, auth=auth, **where), self.fence), timeout)
        self._keystone = CallPath("keystone", KeystoneUnavailable)

    def octavia(self) -> Octavia:
        """Octavia's calls (:mod:`.octavia`): the catalog's
        ``load-balancer`` service in ``[neutron]``'s region and interfaces,
        over the same sessions and token, writes fenced alike, each call
        on a path of its own under the same deadline, beating the same
        heartbeat (built on first ask, then the same)."""
        if self._octavia is None:
            from keystoneauth1 import adapter
            where = {k: v for k, v in self._endpoint.items()
                     if k in ("interface", "region_name")}
            where["service_type"] = "load-balancer"
            reads = adapter.Adapter(session=self._session, auth=self._auth,
                                    **where)
            writes = reads if self._writes is None else adapter.Adapter(
                session=self._writes, auth=self._auth, **where)
            self._octavia = Octavia(
                OctaviaTransport(reads, writes, self.fence), self.timeout,
                deadline=self.deadline, beat=self.beat)
        return self._octavia

    @property
    def login(self) -> LoginPolicy:
        """When a login may happen (the policy of :attr:`_auth`)."""
        return self._auth.policy  # type: ignore[no-any-return]

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  deadline: float | None = None,
                  fence: WriteFence | None = None,
                  clock: Callable[[], float] = time.time,
                  master_pid: int | None = None,
                  beat: Callable[[], None] | None = None) -> OpenStack:
        """The adapter ``[neutron]`` describes; ``deadline``: the whole-call
        deadline when not the default (the readiness checks'); ``fence``:
        what every write asks first (a leading handler process's lease);
        ``clock``: the wall clock a token's expiry is read on;
        ``master_pid``: the replica's master, named in the User-Agent
        (None: this process has none, as a tool); ``beat``: the caller's
        heartbeat, called while a call waits (a worker's)."""
        from keystoneauth1 import exceptions as ks_exc
        from keystoneauth1 import loading as ks_loading
        group = controller_conf.NEUTRON_GROUP
        controller_conf.register_neutron(conf)
        from kuryr_supervisor.controller.openstack.keystone import PolicedAuth
        try:
            plugin: Any = ks_loading.load_auth_from_conf_options(conf, group)
        except ks_exc.ClientException as exc:
            raise OpenStackRefused(f"[neutron] auth options: {exc}") from exc
        if plugin is None:
            raise OpenStackRefused("[neutron] auth_type is not set")
        timeout = timeouts.request_timeout(conf)
        # Every login, whichever call needs it, passes the policy.
        auth = PolicedAuth(plugin, LoginPolicy(
            float(conf.controller.token_renew_margin)), timeout=timeout,
            clock=clock)
        fence = fence or WriteFence()
        # The session's timeout bounds token requests and discovery too;
        # its User-Agent names this replica on every request it sends
        # (Keystone's logins, Neutron's calls; the CNI role's checks too).
        role = str(conf.role) if "role" in conf else "controller"
        node = node_name(conf) if role != "controller" else ""
        discovered: dict[str, Any] = {}     # one discovery for both sessions

        def session(transport: Any) -> Any:
            made = ks_loading.load_session_from_conf_options(
                conf, group, auth=auth, timeout=timeout,
                user_agent=useragent.for_role(role, node, master_pid),
                discovery_cache=discovered)
            # Concurrent callers (bulk creates in flight, pool claims) each
            # keep their connection instead of opening and dropping one.
            for scheme in ("https://", "http://"):
                made.mount(scheme, transport(pool_maxsize=CONNECTIONS))
            return made
        from keystoneauth1 import session as ks_session

        from kuryr_supervisor.controller.openstack import sendfence
        reads = session(ks_session.TCPKeepAliveAdapter)
        # A fence that can close: writes (and the logins and discovery
        # they need) through a transport checking it before each send.
        writes = session(functools.partial(sendfence.FencedAdapter, fence)) \
            if fence.closes else None
        return cls(reads, auth, timeout=timeout, deadline=deadline,
                   endpoint=_endpoint(conf[group]), fence=fence, writes=writes,
                   beat=beat)

    # -- Keystone ---------------------------------------------------------------
    def token(self) -> Token:
        """The current token, authenticating only if there is none or it
        expires within the renewal margin."""
        return self._bounded("Keystone token", self._token, via=self._keystone)

    def _token(self) -> Token:
        from keystoneauth1 import exceptions as ks_exc

        from kuryr_supervisor.controller.openstack.keystone import failure
        try:
            access = self._auth.get_access(self._session)
        except ks_exc.ClientException as exc:
            raise KeystoneUnavailable(
                failure("Keystone", exc, self.timeout)) from exc
        expires = access.expires
        return Token(expires_at=expires.timestamp() if expires else 0.0,
                     project_id=access.project_id or "")


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
