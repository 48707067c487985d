"""One Kubernetes API server as the transport reaches it: its URL, the TLS
material that proves it (and, with a client certificate, us), and the
bearer token of each request.

Built by :mod:`.config` from Kuryr's options, a kubeconfig
(:mod:`.kubeconfig`) or the pod's service account, and used by
:mod:`.transport`. Plain data and the standard library only: the daemon
talks to the API over urllib3 with no client library, whose import (with
its models, pydantic, requests and oauthlib) cost every node daemon about
17 MiB and half a second of start-up.

Invariants: a token file is re-read on every request (bound service
account tokens rotate, and a rotated token must be used at once); key
material given inline is written only to a private temporary file for the
moment the SSL context loads it.
"""
from __future__ import annotations

import dataclasses
import os
import ssl
import tempfile

from kuryr_supervisor.kubernetes.wire import K8sPermanent, K8sTemporary


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where the API is and how to authenticate to it."""

    #: ``https://host:port`` (or ``http://`` for a loopback test server).
    host: str
    #: Verify the server's certificate (the CA below, else the system's).
    verify: bool = True
    ca_file: str = ""
    #: PEM text of the CA bundle (a kubeconfig's certificate-authority-data).
    ca_data: str = ""
    cert_file: str = ""
    key_file: str = ""
    #: PEM bytes of the client certificate and key (client-*-data).
    cert_data: bytes = b""
    key_data: bytes = b""
    #: A bearer token as given, or a file re-read per request.
    token: str = ""
    token_file: str = ""

    def authorization(self) -> str:
        """The Authorization header's value; empty when none is sent.
        A token file that cannot be read is a temporary fault (a volume
        remounted during rotation), reported on the request that needed it."""
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as f:
                    token = f.read().strip()
            except OSError as exc:
                raise K8sTemporary(
                    f"cannot read token file {self.token_file}: {exc}") from exc
            return f"Bearer {token}" if token else ""
        return f"Bearer {self.token}" if self.token else ""

    @property
    def secure(self) -> bool:
        return self.host.lower().startswith("https://")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context for an https server, None for plain http. A missing or
        unreadable file, or material that does not parse, is permanent: the
        configuration has to change."""
        if not self.secure:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        try:
            if not self.verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif self.ca_file or self.ca_data:
                context.load_verify_locations(cafile=self.ca_file or None,
                                              cadata=self.ca_data or None)
            if self.cert_data or self.cert_file:
                self._load_client_cert(context)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise K8sPermanent(f"Kubernetes TLS material: {exc}") from exc
        return context

    def _load_client_cert(self, context: ssl.SSLContext) -> None:
        if not (self.cert_data or self.key_data):
            context.load_cert_chain(self.cert_file, self.key_file or None)
            return
        # ssl loads a chain only from files: a private directory, emptied
        # as soon as the context holds the key.
        with tempfile.TemporaryDirectory(prefix="kuryr-k8s-") as private:
            cert = self.cert_file or _private_copy(private, "cert.pem", self.cert_data)
            key = self.key_file or _private_copy(private, "key.pem", self.key_data)
            context.load_cert_chain(cert, key)


def _private_copy(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path
