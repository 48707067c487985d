"""The Kubernetes API adapter: the only module that imports ``kubernetes``.

The client library is imported when a client is first built, never at
import time: in standalone mode the daemon does not pay its ~30 MiB and
~0.2 s of start-up.

The client library provides configuration (in-cluster service account,
kubeconfig, or Kuryr's api_root/token_file options), authentication and
the HTTP transport; requests are made on raw paths and answers decoded as
plain JSON into the few fields the daemon uses, so a list of hundreds of
pods never becomes hundreds of model objects.

Invariants: every request has a client timeout (watches: the server-side
``timeoutSeconds`` plus a margin), so no caller blocks forever; every client
failure leaves this module as one of :class:`K8sGone`,
:class:`K8sTemporary` or :class:`K8sPermanent`, chained to its cause.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import urllib3
from oslo_config import cfg

from kuryr_supervisor.registry import Pod

if TYPE_CHECKING:
    from kubernetes import client

LOG = logging.getLogger(__name__)

_SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class K8sError(Exception):
    """Base of the adapter's errors; ``status`` is the HTTP status or 0."""

    def __init__(self, msg: str, status: int = 0) -> None:
        super().__init__(msg)
        self.status = status


class K8sGone(K8sError):
    """410: the resourceVersion is too old; relist."""


class K8sTemporary(K8sError):
    """5xx, 429, timeouts, connection errors: retry with backoff."""


class K8sPermanent(K8sError):
    """Other 4xx (RBAC, bad request): retrying the same call cannot help."""


def _from_status(status: int, msg: str) -> K8sError:
    if status == 410:
        return K8sGone(msg, status)
    if status >= 500 or status in (408, 429) or status == 0:
        return K8sTemporary(msg, status)
    return K8sPermanent(msg, status)


def preload() -> None:
    """Import the client library now. The master calls this before forking
    in Kubernetes mode, so the workers that build clients (Watcher, Server,
    HealthManager) share its pages instead of importing ~30 MiB each."""
    import kubernetes.client  # noqa: F401
    import kubernetes.config  # noqa: F401


def _api_exception() -> type[client.ApiException]:
    from kubernetes.client import ApiException
    return ApiException


# -- configuration -------------------------------------------------------------
def is_configured(conf: cfg.ConfigOpts,
                  environ: Mapping[str, str] = os.environ) -> bool:
    """False means standalone mode: no Kubernetes API to talk to."""
    k = conf.kubernetes
    return bool(k.api_root or k.kubeconfig
                or environ.get("KUBERNETES_SERVICE_HOST"))


def node_name(conf: cfg.ConfigOpts,
              environ: Mapping[str, str] = os.environ) -> str:
    return (conf.kubernetes.node_name or environ.get("KURYR_NODE_NAME")
            or environ.get("NODE_NAME") or socket.gethostname())


def _token_hook(path: str) -> Any:
    """Re-read a (possibly rotated, bound) token file on each request."""
    def refresh(configuration: client.Configuration) -> None:
        try:
            with open(path, encoding="utf-8") as f:
                configuration.api_key["authorization"] = f.read().strip()
        except OSError:
            LOG.warning("cannot read token file %s", path, exc_info=True)
    return refresh


def make_configuration(conf: cfg.ConfigOpts,
                       environ: Mapping[str, str] = os.environ
                       ) -> client.Configuration:
    """api_root (Kuryr's options) > kubeconfig > in-cluster service account."""
    k = conf.kubernetes
    from kubernetes import client, config  # standalone never pays for it
    configuration = client.Configuration()
    try:
        if k.api_root:
            configuration.host = k.api_root.rstrip("/")
            configuration.verify_ssl = bool(k.ssl_verify_server_crt)
            if k.ssl_ca_crt_file:
                configuration.ssl_ca_cert = k.ssl_ca_crt_file
            if k.token_file:
                configuration.api_key_prefix["authorization"] = "Bearer"
                refresh = _token_hook(k.token_file)
                refresh(configuration)      # the client sends only known keys
                configuration.refresh_api_key_hook = refresh
        elif k.kubeconfig:
            config.load_kube_config(config_file=k.kubeconfig,
                                    client_configuration=configuration,
                                    persist_config=False)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise K8sPermanent(f"Kubernetes client configuration: {exc}") from exc
    configuration.retries = False       # the callers own retries and backoff
    return configuration


# -- decoding ------------------------------------------------------------------
def pod_from_json(obj: Mapping[str, Any]) -> Pod:
    meta = obj.get("metadata") or {}
    return Pod(namespace=meta.get("namespace", ""), name=meta.get("name", ""),
               uid=meta.get("uid", ""),
               deletion_timestamp=meta.get("deletionTimestamp"))


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    pod: Pod | None
    resource_version: str


def parse_event(line: bytes) -> WatchEvent:
    """Decode one watch line; an ERROR event is raised as its taxonomy."""
    try:
        raw = json.loads(line)
        kind, obj = raw["type"], raw.get("object") or {}
    except (ValueError, KeyError, TypeError) as exc:
        raise K8sTemporary(f"undecodable watch event: {line[:200]!r}") from exc
    if kind == "ERROR":
        raise _from_status(int(obj.get("code") or 0),
                           f"watch error: {obj.get('message', obj)}")
    rv = (obj.get("metadata") or {}).get("resourceVersion", "")
    pod = None if kind == "BOOKMARK" else pod_from_json(obj)
    return WatchEvent(kind, pod, rv)


class WatchStream:
    """An open watch; iterate for events, ``close()`` from any thread."""

    def __init__(self, response: urllib3.HTTPResponse) -> None:
        self._response = response
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[WatchEvent]:
        buf = b""
        complete = False
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield parse_event(line)
            complete = True
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if self._closed.is_set():
                return
            raise K8sTemporary(f"watch stream broken: {exc}") from exc
        finally:
            if not complete:        # never pool a half-read connection
                self._response.close()
            self._response.release_conn()

    def close(self) -> None:
        self._closed.set()
        try:
            self._response.shutdown()
        except Exception:  # noqa: BLE001 - best effort from another thread
            LOG.debug("watch shutdown failed", exc_info=True)
        self._response.close()


# -- the client ------------------------------------------------------------------
class K8sClient:
    """The calls the daemon makes, on this node's pods and Node object."""

    def __init__(self, configuration: client.Configuration, *, node: str,
                 request_timeout: float = 5.0, watch_timeout: int = 60) -> None:
        from kubernetes import client
        self._api = client.ApiClient(configuration)
        self.node = node
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts,
                  environ: Mapping[str, str] = os.environ) -> K8sClient:
        return cls(make_configuration(conf, environ),
                   node=node_name(conf, environ),
                   request_timeout=conf.kubernetes.request_timeout,
                   watch_timeout=conf.kubernetes.watch_timeout)

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
        try:
            params = self._api.param_serialize(
                method, path, query_params=query or [], header_params=headers,
                body=body, auth_settings=["BearerToken"])
            resp = self._api.call_api(
                *params, _request_timeout=timeout or (self.request_timeout,
                                                       self.request_timeout))
        except _api_exception() as exc:
            raise _from_status(exc.status or 0, f"{method} {path}: {exc.reason}"
                               ) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise K8sTemporary(f"{method} {path}: {exc}") from exc
        raw: urllib3.HTTPResponse = resp.response
        if not 200 <= raw.status < 300:
            try:
                detail = raw.data[:300].decode("utf-8", "replace")
            except (urllib3.exceptions.HTTPError, OSError):
                detail = ""
            finally:
                raw.release_conn()
            raise _from_status(raw.status, f"{method} {path}: HTTP "
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

    @property
    def _selector(self) -> tuple[str, str]:
        return ("fieldSelector", f"spec.nodeName={self.node}")

    # -- pods ------------------------------------------------------------------
    def list_pods(self) -> tuple[list[Pod], str]:
        """This node's pods and the list's resourceVersion."""
        data = self._json("GET", "/api/v1/pods", query=[self._selector])
        pods = [pod_from_json(item) for item in data.get("items") or []]
        return pods, (data.get("metadata") or {}).get("resourceVersion", "")

    def watch_pods(self, resource_version: str) -> WatchStream:
        """Open a bounded watch resuming after ``resource_version``."""
        raw = self._request("GET", "/api/v1/pods", query=[
            self._selector, ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.watch_timeout)],
            timeout=(self.request_timeout, self.watch_read_timeout))
        return WatchStream(raw)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod, or None if the API says it does not exist (404)."""
        try:
            data = self._json("GET", f"/api/v1/namespaces/{quote(namespace, '')}"
                                     f"/pods/{quote(name, '')}")
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return pod_from_json(data)

    # -- node ------------------------------------------------------------------
    def get_node(self) -> dict[str, Any]:
        node: dict[str, Any] = self._json("GET", f"/api/v1/nodes/{quote(self.node, '')}")
        return node

    def pod_cidr(self) -> str | None:
        return (self.get_node().get("spec") or {}).get("podCIDR") or None

    def patch_node_condition(self, condition: Mapping[str, Any]) -> None:
        """Set one status condition; strategic merge keys conditions by type."""
        self._json("PATCH", f"/api/v1/nodes/{quote(self.node, '')}/status",
                   body={"status": {"conditions": [dict(condition)]}},
                   content_type="application/strategic-merge-patch+json")

    # -- health ----------------------------------------------------------------
    def probe(self, timeout: float = 2.0) -> tuple[bool, str]:
        """GET /readyz (older servers: /healthz) within ``timeout``."""
        for path in ("/readyz", "/healthz"):
            try:
                self._read(self._request("GET", path,
                                         timeout=(timeout, timeout)))
                return True, f"{path} ok"
            except K8sPermanent as exc:
                if exc.status == 404 and path == "/readyz":
                    continue
                return False, str(exc)
            except K8sError as exc:
                return False, str(exc)
        return False, "no health endpoint"  # pragma: no cover
