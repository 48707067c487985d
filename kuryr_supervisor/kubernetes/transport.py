"""The Kubernetes API transport: one authenticated connection pool, raw
requests with a deadline, and the mapping of every failure to the adapter's
errors.

With :mod:`.config` and :mod:`.leasecalls` (the typed Lease API), this
module is the only importer of ``kubernetes``; the calls built on it
(:mod:`.client`, :mod:`.podportcalls`, :mod:`.nodecalls`) make raw
requests through it. The client
library is imported when a client is first built, never at import time: in
standalone mode the daemon does not pay its ~30 MiB and ~0.2 s of start-up.

The client library provides authentication and the HTTP transport;
requests are made on raw paths and answers decoded as plain JSON, so a list
of hundreds of pods never becomes hundreds of model objects.

Invariants: every request has a client timeout (watches: the server-side
``timeoutSeconds`` plus a margin), so no caller blocks forever; every client
failure leaves the adapter as one of :class:`~.wire.K8sGone`,
:class:`~.wire.K8sTemporary` or :class:`~.wire.K8sPermanent`, chained to its
cause.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self

import urllib3
from oslo_config import cfg

from kuryr_supervisor import useragent
from kuryr_supervisor.kubernetes import podport
from kuryr_supervisor.kubernetes.config import make_configuration, node_name
from kuryr_supervisor.kubernetes.fence import WriteFence
from kuryr_supervisor.kubernetes.wire import K8sTemporary, from_status

if TYPE_CHECKING:
    from kubernetes import client


def api_exception() -> type[client.ApiException]:
    """The client library's error class, imported only once one is raised."""
    from kubernetes.client import ApiException
    return ApiException


@contextlib.contextmanager
def mapped_errors(what: str) -> Iterator[None]:
    """Leave a client library call only as one of the adapter's errors:
    an API answer by its status, a network failure as temporary."""
    try:
        yield
    except api_exception() as exc:
        raise from_status(exc.status or 0, f"{what}: {exc.reason}") from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise K8sTemporary(f"{what}: {exc}") from exc


def fenced(method: str, path: str) -> bool:
    """Writes that steer pods or nodes: PodPorts, and Node status (the
    controller's network judge); the fence allows them only while leading
    (:mod:`.fence`; never armed in the CNI role)."""
    if method == "GET":
        return False
    return f"/{podport.PLURAL}" in path or (
        path.startswith("/api/v1/nodes/") and path.endswith("/status"))


class K8sTransport:
    """The connection to one API server, for this node; the calls on it are
    the subclasses' (see :class:`~.client.K8sClient`)."""

    def __init__(self, configuration: client.Configuration, *, node: str,
                 request_timeout: float = 5.0, watch_timeout: int = 60,
                 user_agent: str = "", fence: WriteFence | None = None) -> None:
        from kubernetes import client
        self._api = client.ApiClient(configuration)
        if user_agent:
            # Sent with every request: the API server's audit and access
            # logs name the replica (see :mod:`kuryr_supervisor.useragent`).
            self._api.user_agent = user_agent
        self.node = node
        #: Asked before each PodPort write (a leading controller's lease).
        self.fence = fence or WriteFence()
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts,
                  environ: Mapping[str, str] = os.environ, *,
                  fence: WriteFence | None = None) -> Self:
        node = node_name(conf, environ)
        # (A tool's configuration may not hold [DEFAULT] role.)
        role = str(conf.role) if "role" in conf else "cni"
        return cls(make_configuration(conf, environ), node=node,
                   request_timeout=conf.kubernetes.request_timeout,
                   watch_timeout=conf.kubernetes.watch_timeout,
                   user_agent=useragent.for_role(role, node, environ),
                   fence=fence)

    def close(self) -> None:
        self._api.close()

    @property
    def watch_read_timeout(self) -> float:
        """Longest silence of a healthy watch: the server ends it by then."""
        return self.watch_timeout + self.request_timeout + 5.0

    def _request(self, method: str, path: str, *,
                 query: list[tuple[str, Any]] | None = None,
                 body: Any = None, content_type: str | None = None,
                 timeout: Any = None) -> urllib3.HTTPResponse:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        with mapped_errors(f"{method} {path}"):
            params = self._api.param_serialize(
                method, path, query_params=query or [], header_params=headers,
                body=body, auth_settings=["BearerToken"])
            if fenced(method, path):
                # As late as can be: a replica paused past its lease exits
                # here rather than write beside the new leader.
                self.fence.check(f"{method} {path}")
            resp = self._api.call_api(
                *params, _request_timeout=timeout or (self.request_timeout,
                                                       self.request_timeout))
        raw: urllib3.HTTPResponse = resp.response
        if not 200 <= raw.status < 300:
            try:
                detail = raw.data[:300].decode("utf-8", "replace")
            except (urllib3.exceptions.HTTPError, OSError):
                detail = ""
            finally:
                raw.release_conn()
            raise from_status(raw.status, f"{method} {path}: HTTP "
                                           f"{raw.status} {detail}")
        return raw

    @staticmethod
    def _read(raw: urllib3.HTTPResponse) -> bytes:
        """The whole body; the connection goes back to the pool clean."""
        try:
            return bytes(raw.data)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raw.close()
            raise K8sTemporary(f"reading the response: {exc}") from exc
        finally:
            raw.release_conn()

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        data = self._read(self._request(method, path, **kwargs))
        try:
            return json.loads(data)
        except ValueError as exc:
            raise K8sTemporary(f"{method} {path}: bad JSON") from exc
