"""Where the daemon finds the Kubernetes API, and how it authenticates.

Kubernetes mode or standalone (:func:`is_configured`), this node's name, and
the :class:`~.endpoint.Endpoint` the transport talks to: Kuryr's
``api_root``/``token_file`` options, a kubeconfig (:mod:`.kubeconfig`), or
the pod's service account. Kept apart from :mod:`.client` (the requests) so
that the master can decide the mode and preload the transport without
building a client.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from oslo_config import cfg

from kuryr_supervisor import version
from kuryr_supervisor.kubernetes.endpoint import Endpoint
from kuryr_supervisor.kubernetes.wire import K8sPermanent

#: The pod's service account, as the kubelet mounts it.
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def preload() -> None:
    """Import the transport's libraries now. The master calls this before
    forking in Kubernetes mode, so the workers that build clients (Watcher,
    Server, HealthManager) share their pages instead of importing them each."""
    import ssl  # noqa: F401

    import urllib3  # noqa: F401


def missing_library() -> str:
    """The one line for Kubernetes mode without the ``kubernetes`` extra's
    libraries (urllib3, PyYAML), with the command that installs them."""
    return ("Kubernetes mode needs the kubernetes extra's libraries: "
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


def in_cluster(environ: Mapping[str, str],
               account: str = SERVICE_ACCOUNT) -> Endpoint:
    """The API as a pod sees it: the service's address from the
    environment, the mounted CA and (rotated, re-read) token."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), \
        environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise K8sPermanent("Kubernetes client configuration: no api_root, no "
                           "kubeconfig, and KUBERNETES_SERVICE_HOST/PORT unset"
                           ) from KeyError("KUBERNETES_SERVICE_HOST")
    token, ca = os.path.join(account, "token"), os.path.join(account, "ca.crt")
    for path in (token, ca):
        if not os.path.isfile(path):
            raise K8sPermanent(f"Kubernetes client configuration: the service "
                               f"account's {path} is missing") from \
                FileNotFoundError(path)
    if ":" in host:         # an IPv6 address
        host = f"[{host}]"
    return Endpoint(host=f"https://{host}:{port}", ca_file=ca, token_file=token)


def make_endpoint(conf: cfg.ConfigOpts,
                  environ: Mapping[str, str] = os.environ) -> Endpoint:
    """api_root (Kuryr's options) > kubeconfig > in-cluster service account."""
    k = conf.kubernetes
    if k.api_root:
        return Endpoint(host=k.api_root.rstrip("/"),
                        verify=bool(k.ssl_verify_server_crt),
                        ca_file=k.ssl_ca_crt_file, token_file=k.token_file)
    if k.kubeconfig:
        from kuryr_supervisor.kubernetes import kubeconfig
        try:
            return kubeconfig.load(k.kubeconfig)
        except ImportError as exc:
            raise K8sPermanent(missing_library()) from exc
        except (kubeconfig.KubeconfigError, OSError) as exc:
            raise K8sPermanent(f"Kubernetes client configuration: {exc}") from exc
    return in_cluster(environ)

