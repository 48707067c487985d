"""CHECK, STATUS and GC: the runtime's upkeep commands, over IPAM and binding.

Role: what each of these commands looks at and decides.
:class:`~kuryr_supervisor.cni.service.CNIService` dispatches them, holds the
container's lock around CHECK and hands GC its ``forget`` (DEL under the
container's lock), so neither races an ADD or a DEL of the same container.

Invariants:
- CHECK changes nothing; a pod that differs from its reservation or from
  what plumb made is a finding (CheckFailed), not a fault of ours.
- STATUS never waits: it says NotAvailable (50) while the daemon drains,
  while the HealthManager's checks say an ADD cannot be served (no
  ovn-controller, OVSDB unusable), while an environment fault makes every
  ADD fail or while the store is not open (no pod subnet yet), and
  LimitedConnectivity (51) when the checks say running pods may have lost
  their network too.
- GC unplumbs before it releases (through ``forget``), spares allocations
  newer than itself, and collects as much as it can before it reports what
  it left behind.
"""
from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Protocol

from kuryr_supervisor import errors
from kuryr_supervisor.cni.binding.base import CANARY
from kuryr_supervisor.cni.ipam import PENDING, Allocation
from kuryr_supervisor.cni.ports import Binding, Ipam
from kuryr_supervisor.cni.protocol import Attachment, Request
from kuryr_supervisor.state import Fault, SharedState

LOG = logging.getLogger(__name__)


class Forget(Protocol):
    """:meth:`CNIService.forget <kuryr_supervisor.cni.service.CNIService.forget>`:
    DEL without a request, under the container's lock; with ``created``,
    nothing happens if that allocation was released or replaced."""

    def __call__(self, container_id: str, ifname: str, netns: str = "", *,
                 created: float | None = None) -> None: ...


def check(ipam: Ipam, binding: Binding, request: Request,
          expected: ipaddress.IPv4Interface) -> None:
    """CHECK, the container's lock held: the reservation against
    ``expected`` (prevResult's address), then the pod against both."""
    where = f"{request.container_id}/{request.ifname}"
    alloc = ipam.get(request.container_id, request.ifname)
    if alloc is None:
        raise errors.CheckFailed(f"no address is reserved for {where}")
    if alloc.state == PENDING:
        raise errors.CheckFailed(
            f"{where} was never finished (its ADD did not complete)")
    if alloc.address != expected:
        raise errors.CheckFailed(
            f"prevResult says {expected}, the reservation is {alloc.address}")
    # The pod's port as its source says now (the PodPort), for a binding
    # whose host end names it (OVS); the Linux bridge's names none.
    port_of = getattr(ipam, "port_id", None)
    iface_id = (port_of(alloc.pod) if port_of is not None
                and getattr(binding, "names_port", False) else None)
    try:
        binding.check(
            container_id=request.container_id, ifname=request.ifname,
            netns=request.netns, address=alloc.address,
            gateway=alloc.gateway, iface_id=iface_id)
    except errors.PlumbingError as exc:
        # The pod differs from its prevResult: a finding, not a fault.
        raise errors.CheckFailed(exc.msg, exc.details) from exc


#: Environment faults that make every ADD fail (STATUS code 50).
ADD_FAULTS = (Fault.IPAM_STORE | Fault.DISK_FULL | Fault.BRIDGE_KIND
              | Fault.NET_ADMIN)


def status(availability: Callable[[], str | None] | None,
           state: SharedState | None) -> None:
    """STATUS: success only if an ADD could be served now; 51 when the
    running pods may have lost their network too (see the module).

    Answered from what the daemon already holds, never waiting on a
    dependency: the draining flag, what the HealthManager published from
    its checks (:class:`~kuryr_supervisor.state.cnistatus.StatusBoard`),
    the environment faults, and the IPAM's ``availability`` (no I/O)."""
    if state is not None:
        if state.draining():
            raise errors.NotAvailable("the daemon is shutting down")
        code, _, detail = state.cni_status.answer()
        if code == 51:
            raise errors.LimitedConnectivity(detail or "data plane broken")
        if code:
            raise errors.NotAvailable(detail or "data plane not ready")
        faults = state.faults() & ADD_FAULTS
        if faults:
            raise errors.NotAvailable("environment fault: " + ", ".join(
                (f.name or "").lower() for f in Fault if f and f in faults))
    why = availability() if availability is not None else None
    if why:
        raise errors.NotAvailable(why)


def gc(ipam: Ipam, binding: Binding, valid: frozenset[Attachment], *,
       started: float, forget: Forget) -> None:
    """Release every allocation not in ``valid`` (the runtime's list), then
    delete host veths no allocation owns (the node's canary's is the
    HealthManager's, never collected).

    Host interfaces are listed *before* allocations: a veth exists only
    after its allocation, so any veth seen first whose owner is missing
    from the later list is truly leaked (or already being deleted).
    Allocations newer than ``started`` (this GC's wall-clock start) are
    left alone: their ADD may be in flight and simply not yet known to the
    runtime's list.
    """
    host_ifs = set(binding.host_interfaces())
    allocations = ipam.list()
    failures: list[str] = []
    for alloc in allocations:
        key = Attachment(alloc.container_id, alloc.ifname)
        if key in valid or alloc.created >= started:
            continue
        try:
            _collect(alloc, forget)
        except Exception as exc:  # noqa: BLE001 - collect as much as possible
            LOG.warning("GC of %s/%s failed: %s", alloc.container_id,
                        alloc.ifname, exc)
            failures.append(f"{alloc.container_id}/{alloc.ifname}: {exc}")
    owned = {binding.host_ifname(a.container_id, a.ifname)
             for a in allocations} | {binding.host_ifname(*CANARY)}
    for name in sorted(host_ifs - owned):
        try:
            binding.remove_host_interface(name)
            LOG.info("GC: removed leaked host interface %s", name)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{name}: {exc}")
    if failures:
        raise errors.InternalError(
            f"GC left {len(failures)} item(s) behind", "; ".join(failures))


def _collect(alloc: Allocation, forget: Forget) -> None:
    LOG.info("GC: %s/%s (%s) is not a valid attachment",
             alloc.container_id, alloc.ifname, alloc.address)
    # Skipped if deleted or re-added since it was listed.
    forget(alloc.container_id, alloc.ifname, alloc.netns,
           created=alloc.created)
