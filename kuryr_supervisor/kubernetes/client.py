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

import json
import logging
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import urllib3
from oslo_config import cfg

from kuryr_supervisor.kubernetes.registry import Pod
from kuryr_supervisor.kubernetes.wire import (  # noqa: F401 - re-exported
    K8sError,
    K8sGone,
    K8sPermanent,
    K8sTemporary,
    WatchEvent,
    WatchStream,
    from_status,
    pod_from_json,
)

if TYPE_CHECKING:
    from kubernetes import client

LOG = logging.getLogger(__name__)

_SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


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
            raise from_status(exc.status or 0, f"{method} {path}: {exc.reason}"
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

    @property
    def _selector(self) -> tuple[str, str]:
        return ("fieldSelector", f"spec.nodeName={self.node}")

    # -- pods ------------------------------------------------------------------
    def list_pods(self, resource_version: str = "") -> tuple[list[Pod], str]:
        """This node's pods and the list's resourceVersion.

        ``resource_version`` picks who serves it: "" a consistent read (a
        quorum read from etcd); "0" any version, from the API server's watch
        cache; a version seen before, from the cache, never older than it
        (``resourceVersionMatch=NotOlderThan``) -- the cheap relist.
        """
        query = [self._selector]
        if resource_version:
            query.append(("resourceVersion", resource_version))
            if resource_version != "0":
                query.append(("resourceVersionMatch", "NotOlderThan"))
        data = self._json("GET", "/api/v1/pods", query=query)
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
