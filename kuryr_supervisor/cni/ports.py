"""What the CNI service needs of its collaborators, and the lazy IPAM hook.

The service is written against these structural types, not the concrete
classes, so it is tested with in-memory fakes and never imports pyroute2.
:class:`kuryr_supervisor.cni.ipam.IpamStore` and
:class:`kuryr_supervisor.cni.binding.BridgeBinding` satisfy them.
"""
from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from typing import Any, Protocol

from kuryr_supervisor import errors
from kuryr_supervisor.cni.ipam import Allocation, Plumbing, PodRef


class Ipam(Protocol):
    """What the service needs of :class:`kuryr_supervisor.cni.ipam.IpamStore`."""

    def allocate(self, container_id: str, ifname: str, *, netns: str,
                 pod: PodRef) -> Allocation: ...
    def plumbed(self, container_id: str, ifname: str, *, netconf: str,
                plumbing: Plumbing) -> None: ...
    def release(self, container_id: str, ifname: str) -> Allocation | None: ...
    def get(self, container_id: str, ifname: str) -> Allocation | None: ...
    def list(self) -> list[Allocation]: ...


class Binding(Protocol):
    """What the service needs of :class:`kuryr_supervisor.cni.binding.BridgeBinding`."""

    def plumb(self, *, container_id: str, ifname: str, netns: str,
              address: ipaddress.IPv4Interface,
              gateway: ipaddress.IPv4Address, mac: str | None = None,
              iface_id: str | None = None, owner: str = "") -> Any: ...
    def unplumb(self, *, container_id: str, ifname: str,
                netns: str | None) -> None: ...
    def check(self, *, container_id: str, ifname: str, netns: str,
              address: ipaddress.IPv4Interface,
              gateway: ipaddress.IPv4Address,
              iface_id: str | None = None) -> None: ...
    def host_interfaces(self) -> list[str]: ...
    def host_ifname(self, container_id: str, ifname: str) -> str: ...
    def remove_host_interface(self, host_ifname: str) -> None: ...


class LazyIpam:
    """Opens the allocation store on first use, with the subnet a provider
    gives; the hook that lets the subnet come from the Node's podCIDR."""

    def __init__(self, factory: Callable[[ipaddress.IPv4Network], Ipam],
                 subnet: Callable[[], ipaddress.IPv4Network | None]) -> None:
        self._factory = factory
        self._subnet = subnet
        self._store: Ipam | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._failure = ""

    def __call__(self) -> Ipam:
        with self._lock:
            if self._closed:
                raise errors.TryAgain("the daemon is shutting down")
            if self._store is None:
                subnet = self._subnet()
                if subnet is None:
                    self._failure = "the pod subnet is not known yet"
                    raise errors.TryAgain(self._failure)
                try:
                    self._store = self._factory(subnet)
                except errors.CNIError as exc:
                    self._failure = exc.msg
                    raise
            return self._store

    def availability(self) -> str | None:
        """Why an ADD could not have an address now (None: the store is
        open), from what the last attempt found: never waits, never does
        I/O, so STATUS can ask it (the Server's environment watch opens
        the store at start and tries again every few seconds)."""
        if self._closed:
            return "the daemon is shutting down"
        if self._store is not None:
            return None
        return f"IPAM unavailable: {self._failure or 'the store is not open yet'}"

    def close(self, *, final: bool = True) -> None:
        """Close the store's connection if it was ever opened. ``final`` (a
        graceful stop): checkpoint it first, and open none afterwards, so
        no ``-wal`` is left behind; otherwise the next use reopens it."""
        with self._lock:
            self._closed = self._closed or final
            close = getattr(self._store, "close", None)
        if close is not None:
            close(final=final)
