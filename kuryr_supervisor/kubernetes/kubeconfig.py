"""A kubeconfig file read into an :class:`~.endpoint.Endpoint`: the current
context's cluster and user, as kubectl reads them.

The only importer of PyYAML. Supported: ``server``,
``certificate-authority(-data)``, ``insecure-skip-tls-verify``, and a user
with ``token``, ``tokenFile`` or ``client-certificate(-data)`` and
``client-key(-data)``; relative paths are relative to the file, as kubectl
has them. Refused with a clear error, not run: ``exec`` credential plugins
and ``auth-provider``s; refused, not ignored: basic authentication,
``proxy-url`` and ``tls-server-name``. The daemon runs as root, and a plugin is a command
named by a file; a node is given a token or a certificate instead (the
kubelet's own kubeconfig is one).

A boolean field (``insecure-skip-tls-verify``) must be a YAML boolean, as
kubectl and client-go require: a quoted ``"false"`` is a non-empty string,
and read as truthy it would turn verification off and send the node's
credentials to a server nobody vouches for. Anything else is refused,
naming the field; absent or null is false, as client-go has it.
"""
from __future__ import annotations

import base64
import binascii
import os
import reprlib
from typing import Any

from kuryr_supervisor.kubernetes.endpoint import Endpoint

#: What a context may name that the daemon will not run.
UNSUPPORTED_AUTH = ("exec", "auth-provider")
#: Cluster settings the transport does not implement: refused, never
#: ignored (the API would be reached another way than the file says).
UNSUPPORTED_CLUSTER = ("proxy-url", "tls-server-name")
#: The cluster's boolean fields this reader honours.
BOOLEAN_CLUSTER = ("insecure-skip-tls-verify",)


class KubeconfigError(ValueError):
    """The file cannot give an endpoint; the message names what is wrong."""


def load(path: str, context: str = "") -> Endpoint:
    """The endpoint of ``context`` (default: the file's current-context)."""
    import yaml  # Kubernetes mode with a kubeconfig only
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"{path}: not YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig")
    return from_document(doc, os.path.dirname(os.path.abspath(path)), path, context)


def _named(doc: dict[str, Any], kind: str, name: str, path: str) -> dict[str, Any]:
    for entry in doc.get(kind) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(kind[:-1])
            return body if isinstance(body, dict) else {}
    raise KubeconfigError(f"{path}: no {kind[:-1]} named {name!r}")


def from_document(doc: dict[str, Any], base: str, path: str,
                  context: str = "") -> Endpoint:
    """The endpoint a parsed kubeconfig names; ``base`` resolves relative paths."""
    name = context or doc.get("current-context") or ""
    if not name:
        raise KubeconfigError(f"{path}: no current-context")
    ctx = _named(doc, "contexts", name, path)
    cluster = _named(doc, "clusters", str(ctx.get("cluster", "")), path)
    user = _named(doc, "users", str(ctx["user"]), path) if ctx.get("user") else {}
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise KubeconfigError(f"{path}: cluster of context {name!r} has no "
                              f"http(s) server ({server!r})")
    for kind in UNSUPPORTED_AUTH:
        if user.get(kind):
            raise KubeconfigError(
                f"{path}: the user of context {name!r} authenticates with "
                f"{kind!r}, which kuryr-supervisor does not run; give it a "
                "token, tokenFile or client certificate")
    if user.get("username") or user.get("password"):
        raise KubeconfigError(
            f"{path}: the user of context {name!r} has a username and "
            "password (basic authentication, gone from Kubernetes since "
            "1.19); give it a token, tokenFile or client certificate")
    for key in UNSUPPORTED_CLUSTER:
        if cluster.get(key):
            raise KubeconfigError(
                f"{path}: the cluster of context {name!r} sets {key!r}, "
                "which kuryr-supervisor does not support; give the API "
                "server's address as its certificate names it, reached "
                "directly")
    whose = f"{path}: the cluster of context {name!r}"
    flags = {key: _boolean(cluster, key, whose) for key in BOOLEAN_CLUSTER}

    def file(key: str, where: dict[str, Any]) -> str:
        value = str(where.get(key) or "")
        return os.path.join(base, value) if value else ""

    return Endpoint(
        host=server.rstrip("/"),
        verify=not flags["insecure-skip-tls-verify"],
        ca_file=file("certificate-authority", cluster),
        ca_data=_decoded(cluster, "certificate-authority-data", path).decode(
            "ascii", "replace"),
        cert_file=file("client-certificate", user),
        key_file=file("client-key", user),
        cert_data=_decoded(user, "client-certificate-data", path),
        key_data=_decoded(user, "client-key-data", path),
        token=str(user.get("token") or ""),
        token_file=file("tokenFile", user))


def _boolean(where: dict[str, Any], key: str, whose: str) -> bool:
    """``key``'s value when a YAML boolean (absent or null: false); a
    string (``"false"``, ``"yes"``), a number or anything else is refused
    rather than judged by its truth."""
    value = where.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise KubeconfigError(
            f"{whose} sets {key!r} to {reprlib.repr(value)}, which is not "
            "a boolean: write true or false, unquoted")
    return value


def _decoded(where: dict[str, Any], key: str, path: str) -> bytes:
    value = where.get(key)
    if not value:
        return b""
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KubeconfigError(f"{path}: {key} is not base64") from exc
