"""Where the daemon finds the Kubernetes API, and how it authenticates.

Kubernetes mode or standalone (:func:`is_configured`), this node's name, and
the client library's configuration: Kuryr's ``api_root``/``token_file``
options, a kubeconfig, or the pod's service account. Kept apart from
:mod:`.client` (the requests) so that the master can decide the mode and
preload the library without building a client. The client library is
imported only inside these functions: standalone never pays for it.
"""
from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oslo_config import cfg

from kuryr_supervisor import version
from kuryr_supervisor.kubernetes.wire import K8sPermanent

if TYPE_CHECKING:
    from kubernetes import client

LOG = logging.getLogger(__name__)


def preload() -> None:
    """Import the client library now. The master calls this before forking
    in Kubernetes mode, so the workers that build clients (Watcher, Server,
    HealthManager) share its pages instead of importing ~30 MiB each."""
    import kubernetes.client  # noqa: F401
    import kubernetes.config  # noqa: F401


def missing_library() -> str:
    """The one line for Kubernetes mode without the client library (the
    ``kubernetes`` extra), with the command that installs it."""
    return ("Kubernetes mode needs the kubernetes client library: "
            f"{version.install_hint('kubernetes')}")


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
