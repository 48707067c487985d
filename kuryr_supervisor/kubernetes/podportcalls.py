"""The API calls on PodPorts (``kuryr-supervisor.openstack.org/v1``).

What a PodPort is and means is :mod:`.podport`'s; this module only reads,
watches and writes the objects over the shared transport, so a change of
the resource's paths or verbs touches this module alone.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from kuryr_supervisor.kubernetes import podport
from kuryr_supervisor.kubernetes.transport import K8sTransport
from kuryr_supervisor.kubernetes.wire import K8sPermanent, WatchStream


class PodPortCalls(K8sTransport):
    """PodPort calls, mixed into :class:`~.client.K8sClient`."""

    @staticmethod
    def _podports(namespace: str, name: str = "") -> str:
        path = (f"/apis/{podport.GROUP}/{podport.VERSION}/namespaces/"
                f"{quote(namespace, '')}/{podport.PLURAL}")
        return f"{path}/{quote(name, '')}" if name else path

    def page_podports(self, *, limit: int, token: str = ""
                      ) -> tuple[list[dict[str, Any]], str]:
        """One page of every PodPort of the cluster (raw objects) and the
        next page's token ("" at the end)."""
        query = [("limit", str(limit))]
        if token:
            query.append(("continue", token))
        data = self._json("GET", f"/apis/{podport.GROUP}/{podport.VERSION}/"
                                 f"{podport.PLURAL}", query=query)
        return (list(data.get("items") or []),
                str((data.get("metadata") or {}).get("continue") or ""))

    def list_labelled_podports(self, selector: str
                               ) -> tuple[list[dict[str, Any]], str]:
        """Every PodPort of the cluster whose labels match ``selector``
        (a node's: a few dozen) and the list's version, to watch from."""
        data = self._json("GET", f"/apis/{podport.GROUP}/{podport.VERSION}/"
                                 f"{podport.PLURAL}",
                          query=[("labelSelector", selector)])
        return (list(data.get("items") or []),
                (data.get("metadata") or {}).get("resourceVersion", ""))

    def watch_labelled_podports(self, selector: str, resource_version: str,
                                decode: Any) -> WatchStream:
        """A bounded watch of the PodPorts whose labels match
        ``selector``, events decoded with ``decode``."""
        raw = self._request("GET", f"/apis/{podport.GROUP}/{podport.VERSION}/"
                                   f"{podport.PLURAL}", query=[
            ("labelSelector", selector), ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.watch_timeout)],
            timeout=(self.request_timeout, self.watch_read_timeout))
        return WatchStream(raw, decode)

    def list_podport(self, namespace: str, name: str
                     ) -> tuple[list[dict[str, Any]], str]:
        """The PodPort named ``name`` (0 or 1 item) and the list's version,
        to watch from."""
        data = self._json("GET", self._podports(namespace), query=[
            ("fieldSelector", f"metadata.name={name}")])
        return (list(data.get("items") or []),
                (data.get("metadata") or {}).get("resourceVersion", ""))

    def watch_podport(self, namespace: str, name: str, resource_version: str,
                      timeout: float) -> WatchStream:
        """A watch of one PodPort, events carrying the raw object."""
        seconds = max(1, int(timeout + 0.999))
        raw = self._request("GET", self._podports(namespace), query=[
            ("fieldSelector", f"metadata.name={name}"), ("watch", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", seconds)],
            timeout=(self.request_timeout, seconds + self.request_timeout))
        return WatchStream(raw, lambda obj: obj)

    def get_podport(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self._json("GET",
                                             self._podports(namespace, name))
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def create_podport(self, namespace: str, obj: Mapping[str, Any]
                       ) -> dict[str, Any]:
        """Create; 409 (K8sPermanent) when one of that name exists."""
        out: dict[str, Any] = self._json("POST", self._podports(namespace),
                                         body=dict(obj))
        return out

    def replace_podport(self, namespace: str, name: str,
                        obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace; ``metadata.resourceVersion`` in ``obj`` is the
        precondition (409 when it changed meanwhile)."""
        out: dict[str, Any] = self._json(
            "PUT", self._podports(namespace, name), body=dict(obj))
        return out

    def patch_podport_status(self, namespace: str, name: str,
                             status: Mapping[str, Any]) -> None:
        """Merge ``status`` into the PodPort's status subresource."""
        self._json("PATCH", self._podports(namespace, name) + "/status",
                   body={"status": dict(status)},
                   content_type="application/merge-patch+json")

    def delete_podport(self, namespace: str, name: str,
                       uid: str = "") -> bool:
        """Delete (with ``uid`` as precondition); False if already gone."""
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self._read(self._request("DELETE", self._podports(namespace, name),
                                     body=body))
        except K8sPermanent as exc:
            if exc.status == 404:
                return False
            raise
        return True
