"""The Kubernetes API transport: one authenticated connection pool, raw
requests with a deadline, and the mapping of every failure to the adapter's
errors.

The verbs built on it (:mod:`.resource`, one client for every resource,
and :mod:`.client`'s probes) make raw requests on API paths and decode the
answers as plain JSON, so a list of hundreds of pods never becomes
hundreds of model objects. It speaks HTTP through urllib3 to the
:class:`~.endpoint.Endpoint` that :mod:`.config` resolved, with no client
library: the ``kubernetes`` package would add about 17 MiB to every node
daemon for authentication and a connection pool, which this module and
:mod:`.endpoint` do in a few hundred lines.

Invariants: every request has a client timeout (watches: the server-side
``timeoutSeconds`` plus a margin), so no caller blocks forever; every client
failure leaves the adapter as one of :class:`~.wire.K8sGone`,
:class:`~.wire.K8sTemporary` or :class:`~.wire.K8sPermanent`, chained to its
cause; no request is retried here (the callers own retries and backoff).
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlencode

from oslo_config import cfg

from kuryr_supervisor import useragent
from kuryr_supervisor.kubernetes import nodenetwork, podport
from kuryr_supervisor.kubernetes.config import make_endpoint, node_name
from kuryr_supervisor.kubernetes.endpoint import Endpoint
from kuryr_supervisor.kubernetes.fence import WriteFence
from kuryr_supervisor.kubernetes.wire import K8sTemporary, from_status

if TYPE_CHECKING:
    import urllib3

#: Connections kept open to the API server: a process's watches plus its
#: concurrent calls (the port handler's 8 PodPort writers, its watches, the
#: lease and Events). More are opened when needed and closed after use,
#: which urllib3 logs as a warning: the pool is sized above the busiest
#: process's need. Idle, only the connections in use exist.
POOL_SIZE = 16


def http() -> ModuleType:
    """urllib3, imported when a client is first built (the master preloads
    it in Kubernetes mode): a standalone daemon never pays for it."""
    import urllib3
    return urllib3


@contextlib.contextmanager
def mapped_errors(what: str) -> Iterator[None]:
    """Leave a network failure only as the adapter's temporary error."""
    try:
        yield
    except (http().exceptions.HTTPError, OSError) as exc:
        raise K8sTemporary(f"{what}: {exc}") from exc


def fenced(method: str, path: str) -> bool:
    """Writes that steer pods or nodes: PodPorts, Node status and the
    NodeNetwork records (the controller's network judge and canaries: the
    verdicts, canary ports and probe assignments every node acts on); the
    fence allows them only while leading (:mod:`.fence`; never armed in
    the CNI role, whose record writes go through an open one)."""
    if method == "GET":
        return False
    return f"/{podport.PLURAL}" in path or \
        f"/{nodenetwork.PLURAL}" in path or (
            path.startswith("/api/v1/nodes/") and path.endswith("/status"))


def _query(params: list[tuple[str, Any]]) -> str:
    """The query string, booleans as the API spells them."""
    return urlencode([(k, str(v).lower() if isinstance(v, bool) else v)
                      for k, v in params])


def _timeout(value: Any) -> urllib3.Timeout:
    """``(connect, read)`` or one number for both."""
    connect, read = value if isinstance(value, tuple) else (value, value)
    return http().Timeout(connect=connect, read=read)


class K8sTransport:
    """The connection to one API server, for this node; the verbs on it
    are :class:`~.resource.ResourceClient`'s (see :class:`~.client.
    K8sClient`)."""

    def __init__(self, endpoint: Endpoint, *, node: str,
                 request_timeout: float = 5.0, watch_timeout: int = 60,
                 user_agent: str = "", fence: WriteFence | None = None) -> None:
        self.endpoint = endpoint
        #: Asked before each PodPort write (a leading controller's lease).
        self.fence = fence or WriteFence()
        tls = {"ssl_context": endpoint.ssl_context()} if endpoint.secure else {}
        pool_kw: dict[str, Any] = {"maxsize": POOL_SIZE, "block": False,
                                   "retries": False, **tls}
        self._pool = http().connection_from_url(endpoint.host, **pool_kw)
        #: A server URL's path (an API behind a proxy, as
        #: ``https://proxy/k8s/clusters/c1``) prefixes every request's.
        self._prefix = (http().util.parse_url(endpoint.host).path or "").rstrip("/")
        # The fenced writes leave through connections that ask the fence
        # before each socket write, not only before the call (see
        # :mod:`.fencedpool`); an open fence needs none.
        self._writes = self._pool
        if self.fence.closes:
            from kuryr_supervisor.kubernetes.fencedpool import fenced_pool
            self._writes = fenced_pool(endpoint.host, self.fence,
                                       "a write to the Kubernetes API", **pool_kw)
        # Sent with every request: the API server's audit and access logs
        # name the replica (see :mod:`kuryr_supervisor.useragent`).
        self.user_agent = user_agent or "kuryr-supervisor"
        self.node = node
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts,
                  environ: Mapping[str, str] = os.environ, *,
                  fence: WriteFence | None = None,
                  master_pid: int | None = None) -> Self:
        # ``master_pid``: the replica's master, named in the User-Agent
        # (None: this process has none, as a tool).
        node = node_name(conf, environ)
        # (A tool's configuration may not hold [DEFAULT] role.)
        role = str(conf.role) if "role" in conf else "cni"
        return cls(make_endpoint(conf, environ), node=node,
                   request_timeout=conf.kubernetes.request_timeout,
                   watch_timeout=conf.kubernetes.watch_timeout,
                   user_agent=useragent.for_role(role, node, master_pid,
                                                 environ),
                   fence=fence)

    def close(self) -> None:
        self._pool.close()
        self._writes.close()

    @property
    def watch_read_timeout(self) -> float:
        """Longest silence of a healthy watch: the server ends it by then."""
        return self.watch_timeout + self.request_timeout + 5.0

    def request(self, method: str, path: str, *,
                query: list[tuple[str, Any]] | None = None,
                body: Any = None, content_type: str | None = None,
                timeout: Any = None) -> urllib3.HTTPResponse:
        """The answer to one request, its body not read yet (a watch streams
        it); a status outside 2xx is raised as the adapter's error."""
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else \
                body.encode() if isinstance(body, str) else json.dumps(body).encode()
            headers["Content-Type"] = content_type or "application/json"
        url = self._prefix + (f"{path}?{_query(query)}" if query else path)
        with mapped_errors(f"{method} {path}"):
            if authorization := self.endpoint.authorization():
                headers["Authorization"] = authorization
            pool = self._pool
            if fenced(method, path):
                # Before the call, and again before each socket write (the
                # pool's connections): a replica paused past its lease exits
                # rather than write beside the new leader.
                self.fence.check(f"{method} {path}")
                pool = self._writes
            raw = pool.urlopen(
                method, url, body=data, headers=headers, retries=False,
                redirect=False, preload_content=False, assert_same_host=False,
                timeout=_timeout(timeout or self.request_timeout))
        if not 200 <= raw.status < 300:
            try:
                detail = raw.data[:300].decode("utf-8", "replace")
            except (http().exceptions.HTTPError, OSError):
                detail = ""
            finally:
                raw.release_conn()
            raise from_status(raw.status, f"{method} {path}: HTTP "
                                           f"{raw.status} {detail}")
        return raw

    @staticmethod
    def read_body(raw: urllib3.HTTPResponse) -> bytes:
        """The whole body; the connection goes back to the pool clean."""
        try:
            return bytes(raw.data)
        except (http().exceptions.HTTPError, OSError) as exc:
            raw.close()
            raise K8sTemporary(f"reading the response: {exc}") from exc
        finally:
            raw.release_conn()

    def request_json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The answer's JSON (the body read whole, the connection back in
        the pool)."""
        data = self.read_body(self.request(method, path, **kwargs))
        try:
            return json.loads(data)
        except ValueError as exc:
            raise K8sTemporary(f"{method} {path}: bad JSON") from exc
