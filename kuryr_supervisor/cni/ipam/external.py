"""Addresses chosen elsewhere: the pod's Neutron port, announced by the
controller role in the pod's PodPort (``[cni_daemon] address_source =
podport``).

:class:`ExternalIpam` is the service's ``Ipam`` port: on ADD it waits,
bounded by ``timeout``, for the pod's address to be known (``lookup`` itself
blocks until it is announced, e.g. on a watch) (the controller may
still be creating the port when the runtime calls us), then records it in
the same allocation store as the embedded IPAM, so DEL, CHECK, GC and the
Watcher's reclaim need no second path. It never talks to the Kubernetes API
itself: ``lookup`` is wired in by :mod:`kuryr_supervisor.workers.assembly`
(the CNI package does not import the Kubernetes one).

Trust: what ``lookup`` returns is checked against this node's own
configuration (:mod:`.validation`) before anything is recorded or bound; the
address is recorded with the configured gateway (the bridge's address comes
from configuration only). With ``network_from_port`` (the OVS binding) the
node holds no address of the pod network (no bridge of its own, no route
to the pods: Neutron's router and OVN or the agent's flows are the
gateway), so the PodPort's own prefix and gateway are the pod's: the
address is checked against them (a host of its network, not the gateway)
instead of ``[ipam] subnet``, which a node on Neutron's data plane cannot
know, and Neutron's port security holds the port to its address and MAC.

A port's MAC already used on the node (another pod's attachment, an ADD in
flight, the bridge's or any local link's) is refused (code 7): the bridge
would move that MAC's traffic to the new port.

Once the pod's interface is plumbed, ``bound`` (when wired) records it in
the source (the PodPort's ``status.boundAt``): from then on the controller
never changes the pod's address, MAC or port.

Failures: a pod not named in CNI_ARGS is the runtime's mistake (code 4); no
address within the timeout is "try again later" (code 11); a refused port
is code 7 (or 4, another pod's), logged once with the pod and the reason;
none of them counted against the ADD failure budget.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import threading
import time
from collections.abc import Callable

from kuryr_supervisor import errors
from kuryr_supervisor.cni.ipam.records import Allocation, Plumbing, PodRef
from kuryr_supervisor.cni.ipam.store import IpamStore
from kuryr_supervisor.cni.ipam.validation import check_fixed, check_mac_free, local_macs

LOG = logging.getLogger(__name__)

_RETRY_FIRST, _RETRY_MAX = 0.05, 1.0


@dataclasses.dataclass(frozen=True)
class FixedAddress:
    address: ipaddress.IPv4Interface
    gateway: ipaddress.IPv4Address
    mac: str
    #: The pod UID the port was made for, and the port's id.
    pod_uid: str = ""
    port_id: str = ""
    #: The pod's UID as the source of truth says (the API), for runtimes
    #: that leave K8S_POD_UID out of CNI_ARGS.
    api_uid: str = ""


#: ``(pod, seconds)``: the pod's address, waiting up to ``seconds`` for it
#: to be announced (None when the time is up); may raise while the source
#: is unreachable (ADD keeps trying, with backoff, until its own deadline).
Lookup = Callable[[PodRef, float], "FixedAddress | None"]

#: ``(allocation, seconds)``: return once the pod's port (the
#: allocation's ``port_id``) is wired (the source says ACTIVE, or the node
#: saw it installed); raise a CNI error (code 11, never counted) when it is
#: not within ``seconds`` or failed to bind.
Activated = Callable[[Allocation, float], None]


class ExternalIpam:
    """See the module docstring."""

    def __init__(self, store: IpamStore, lookup: Lookup, *,
                 timeout: Callable[[], float],
                 sleep: Callable[[float], object] = time.sleep,
                 links: Callable[[], dict[str, str]] = local_macs,
                 bound: Callable[[PodRef], None] | None = None,
                 activated: Activated | None = None,
                 network_from_port: bool = False) -> None:
        self.store = store
        self.network_from_port = network_from_port
        self._lookup = lookup
        self._bound = bound
        self._activated = activated
        self._timeout = timeout
        self._sleep = sleep
        self._links = links
        self._waiting = threading.local()
        #: MACs of ADDs between their check and their plumbing record:
        #: two pods' ADDs with one MAC run in parallel in this process.
        self._claims: dict[str, tuple[str, str]] = {}
        self._claim_lock = threading.Lock()

    def wait_for(self, pod: PodRef) -> FixedAddress:
        deadline = time.monotonic() + self._timeout()
        self._waiting.deadline = deadline
        delay, problem = _RETRY_FIRST, "no address announced yet"
        while True:
            try:
                fixed = self._lookup(pod, max(0.0, deadline - time.monotonic()))
            except errors.CNIError:
                raise               # the source refused the data: no retry
            except Exception as exc:  # noqa: BLE001 - the source is down: retry
                fixed, problem = None, f"cannot read it: {exc}"
            if fixed is not None:
                return fixed
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.TryAgain(
                    f"pod {pod.namespace}/{pod.name} has no port address "
                    f"from the controller yet ({problem})")
            self._sleep(min(delay, left))
            delay = min(_RETRY_MAX, delay * 2)

    def allocate(self, container_id: str, ifname: str, *, netns: str,
                 pod: PodRef) -> Allocation:
        if not pod.namespace or not pod.name:
            raise errors.InvalidEnvironment(
                "address_source = podport needs K8S_POD_NAMESPACE and "
                "K8S_POD_NAME in CNI_ARGS")
        if self.store.get(container_id, ifname) is not None:
            raise errors.AlreadyExists(
                f"{container_id}/{ifname} already has an address")
        try:
            fixed = self.wait_for(pod)
            subnet, gateway = ((fixed.address.network, fixed.gateway)
                               if self.network_from_port else
                               (self.store.subnet, self.store.gateway))
            check_fixed(address=fixed.address, gateway=fixed.gateway,
                        mac=fixed.mac, port_pod_uid=fixed.pod_uid,
                        subnet=subnet, configured_gateway=gateway,
                        pod_uid=pod.uid or fixed.api_uid)
            with self._claim_lock:
                check_mac_free(fixed.mac, self._macs_in_use(pod))
                self._claims[fixed.mac.lower()] = (container_id, ifname)
        except (errors.InvalidConfig, errors.InvalidEnvironment) as exc:
            LOG.warning("refused port for pod %s/%s (uid %s): %s",
                        pod.namespace, pod.name, pod.uid or "?", exc.msg)
            raise
        try:
            alloc = self.store.record(container_id, ifname, netns=netns,
                                      pod=pod, address=fixed.address,
                                      gateway=gateway)
        except BaseException:
            self._unclaim(container_id, ifname)
            raise
        LOG.debug("%s/%s takes %s (%s) from its port", container_id, ifname,
                  fixed.address, fixed.mac)
        return dataclasses.replace(alloc, mac=fixed.mac,
                                   port_id=fixed.port_id or None)

    def port_id(self, pod: PodRef) -> str | None:
        """The pod's Neutron port as the source says now, without waiting
        (for CHECK); None when unknown or unreadable (CHECK then checks
        that some port is named, not which)."""
        try:
            fixed = self._lookup(pod, 0.0)
        except Exception as exc:  # noqa: BLE001 - CHECK goes on without it
            LOG.debug("pod %s/%s: its port not readable for CHECK: %s",
                      pod.namespace, pod.name, exc)
            return None
        return (fixed.port_id or None) if fixed is not None else None

    def settle(self, alloc: Allocation) -> None:
        """After plumbing, before the ADD is recorded: wait (``activated``,
        when wired) until the pod's port is wired (ACTIVE, or installed by
        OVN), within what is left of this ADD's wait. Its agent only binds the port once it is plugged
        (OVN's controller claims it from the bridge), so this cannot be
        waited for before plumbing."""
        if self._activated is None or not alloc.port_id:
            return
        deadline = getattr(self._waiting, "deadline", None)
        left = (self._timeout() if deadline is None
                else deadline - time.monotonic())
        self._activated(alloc, max(1.0, left))

    def _macs_in_use(self, pod: PodRef) -> dict[str, str]:
        """MAC -> who: this node's links, other pods' attachments (the
        pod's own earlier sandbox keeps its MAC: not another's), ADDs in
        flight."""
        used = dict(self._links())
        for alloc in self.store.list():
            mine = (alloc.pod.uid == pod.uid if pod.uid and alloc.pod.uid
                    else (alloc.pod.namespace, alloc.pod.name)
                    == (pod.namespace, pod.name))
            mac = alloc.plumbing.pod_mac if alloc.plumbing else alloc.mac
            if mac and not mine:
                used.setdefault(mac.lower(), f"pod {alloc.pod.namespace}/"
                                f"{alloc.pod.name} ({alloc.container_id})")
        for mac, (cid, ifname) in self._claims.items():
            used.setdefault(mac, f"an ADD in progress ({cid}/{ifname})")
        return used

    def _unclaim(self, container_id: str, ifname: str) -> None:
        with self._claim_lock:
            for mac, owner in list(self._claims.items()):
                if owner == (container_id, ifname):
                    del self._claims[mac]

    def release(self, container_id: str, ifname: str) -> Allocation | None:
        self._unclaim(container_id, ifname)
        return self.store.release(container_id, ifname)

    def plumbed(self, container_id: str, ifname: str, *, netconf: str,
                plumbing: Plumbing) -> None:
        """Recorded; then the source is told the pod holds its address
        (``bound``: the PodPort's ``status.boundAt``, after which the
        controller never changes it). Telling it is best effort: the ADD
        succeeded whatever the answer."""
        try:
            self.store.plumbed(container_id, ifname, netconf=netconf,
                               plumbing=plumbing)
        finally:
            self._unclaim(container_id, ifname)   # the store has it now
        if self._bound is None:
            return
        alloc = self.store.get(container_id, ifname)
        if alloc is None:
            return
        try:
            self._bound(alloc.pod)
        except Exception as exc:  # noqa: BLE001 - never fails the ADD
            LOG.warning("pod %s/%s: its binding not recorded in the PodPort: "
                        "%s", alloc.pod.namespace, alloc.pod.name, exc)

    def close(self, *, final: bool = False) -> None:
        self.store.close(final=final)

    def get(self, container_id: str, ifname: str) -> Allocation | None:
        return self.store.get(container_id, ifname)

    def list(self) -> list[Allocation]:
        return self.store.list()
