"""The API calls on NodeNetworks (``kuryr-supervisor.openstack.org/v1``).

What a record is and means is :mod:`.nodenetwork`'s; this module only
creates, reads, lists, watches and writes the objects over the shared
transport. The status is written with PUT on the status subresource (the
node), the spec with PUT on the object (the controller), each with the
object's ``metadata.resourceVersion`` as precondition (409 when another
write came between), so no writer overwrites a record it has not read.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from kuryr_supervisor.kubernetes import nodenetwork
from kuryr_supervisor.kubernetes.transport import K8sTransport
from kuryr_supervisor.kubernetes.wire import K8sPermanent, WatchStream


def _path(name: str = "") -> str:
    path = (f"/apis/{nodenetwork.GROUP}/{nodenetwork.VERSION}/"
            f"{nodenetwork.PLURAL}")
    return f"{path}/{quote(name, '')}" if name else path


def _named(name: str) -> list[tuple[str, str]]:
    """The query that selects one record by name (none: every record)."""
    return [("fieldSelector", f"metadata.name={name}")] if name else []


class NodeNetworkCalls(K8sTransport):
    """NodeNetwork calls, mixed into :class:`~.client.K8sClient`."""

    def get_nodenetwork(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self._json("GET", _path(name))
        except K8sPermanent as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def create_nodenetwork(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create; 409 (K8sPermanent) when one of that name exists, 404
        when the resource is not installed."""
        out: dict[str, Any] = self._json("POST", _path(), body=dict(obj))
        return out

    def replace_nodenetwork_status(self, name: str, obj: Mapping[str, Any]
                                   ) -> dict[str, Any]:
        """Replace the status; ``metadata.resourceVersion`` in ``obj`` is
        the precondition."""
        out: dict[str, Any] = self._json("PUT", _path(name) + "/status",
                                         body=dict(obj))
        return out

    def replace_nodenetwork(self, name: str, obj: Mapping[str, Any]
                            ) -> dict[str, Any]:
        """Replace the spec (the controller's: the canary it made and the
        node's share of the probing); ``metadata.resourceVersion`` in
        ``obj`` is the precondition, the status is kept."""
        out: dict[str, Any] = self._json("PUT", _path(name), body=dict(obj))
        return out

    def delete_nodenetwork(self, name: str) -> bool:
        """Delete; False if already gone."""
        try:
            self._read(self._request("DELETE", _path(name)))
        except K8sPermanent as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def page_nodenetworks(self, resource_version: str = "", *, limit: int,
                          token: str = "", name: str = ""
                          ) -> tuple[list[dict[str, Any]], str, str]:
        """One page of every record (``name``: of that one only): (raw
        objects, the list's version, the next page's token or "")."""
        query: list[tuple[str, str]] = [("limit", str(limit)),
                                        *_named(name)]
        if token:
            query.append(("continue", token))
        elif resource_version:
            query.append(("resourceVersion", resource_version))
        data = self._json("GET", _path(), query=query)
        meta = data.get("metadata") or {}
        return (list(data.get("items") or []),
                str(meta.get("resourceVersion") or ""),
                str(meta.get("continue") or ""))

    def watch_nodenetworks(self, resource_version: str,
                           decode: Callable[[Mapping[str, Any]], Any],
                           name: str = "") -> WatchStream:
        """A bounded watch of every record (``name``: of that one only),
        events decoded with ``decode``."""
        raw = self._request("GET", _path(), query=[
            *_named(name),
            ("watch", "true"), ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.watch_timeout)],
            timeout=(self.request_timeout, self.watch_read_timeout))
        return WatchStream(raw, decode)
