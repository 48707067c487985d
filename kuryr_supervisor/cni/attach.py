"""ADD's steps under the container's lock: allocate, plumb, record -- or
replay what was recorded, or repair what a dead ADD left.

Role: the one place that knows an attachment's life in the store
(``pending`` -> ``plumbed``) and what makes a second ADD "the same" one.
:class:`~kuryr_supervisor.cni.service.CNIService` holds the lock and keeps
the failure budget around :func:`add`.

Invariants (the container's lock is held by the caller):

- A fresh ADD costs one write more than allocating: the plumbing facts and
  the netconf digest, recorded after plumbing. Whatever fails, the ADD
  leaves nothing: a failed plumb releases the address, a failed record
  (or a port that does not become ACTIVE, when the address source waits
  for that after plumbing) also deletes the veth.
- A second ADD of a ``plumbed`` attachment in the same netns with the same
  netconf digest (:func:`results.netconf_digest`) is answered from the
  record, rendered in the new request's cniVersion; nothing is touched.
- A ``pending`` attachment seen here belongs to an ADD whose process died
  (it would still hold the lock otherwise). Met by an ADD for the same
  netns it is rolled back -- the host veth deleted (its peer goes with it),
  the address released -- and the ADD done afresh. Rolled back rather than
  finished: a dead ADD may have stopped anywhere inside plumbing, its MACs
  were never recorded, and the address it held was never reported to
  anyone; the rollback is DEL's own steps.
- Any other second ADD (another netns, another netconf, an attachment an
  older daemon recorded without a digest) fails with 102 and changes
  nothing.
"""
from __future__ import annotations

import logging
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import results
from kuryr_supervisor.cni.ipam import PENDING, Allocation, Plumbing, PodRef
from kuryr_supervisor.cni.ports import Binding, Ipam
from kuryr_supervisor.cni.protocol import Request

LOG = logging.getLogger(__name__)


def add(ipam: Ipam, binding: Binding, request: Request,
        pod: PodRef) -> tuple[dict[str, Any], bool]:
    """Attach (or replay, or repair and attach): the ADD result, and
    whether it was made now (False: replayed from the record)."""
    cid, ifname = request.container_id, request.ifname
    digest = results.netconf_digest(request.netconf)
    try:
        alloc = ipam.allocate(cid, ifname, netns=request.netns, pod=pod)
    except errors.AlreadyExists:
        existing = ipam.get(cid, ifname)
        if existing is None:        # the address is taken, not the attachment
            raise
        if existing.state != PENDING:
            return replay(request, existing, digest), False
        repair(ipam, binding, request, existing)
        alloc = ipam.allocate(cid, ifname, netns=request.netns, pod=pod)
    fixed: dict[str, str] = {"mac": alloc.mac} if alloc.mac else {}
    if alloc.port_id:
        fixed.update(iface_id=alloc.port_id, owner=pod.uid or alloc.pod.uid)
    try:
        plumbed = binding.plumb(
            container_id=cid, ifname=ifname, netns=request.netns,
            address=alloc.address, gateway=alloc.gateway, **fixed)
    except BaseException:
        _release_quietly(ipam, cid, ifname)
        raise
    facts = Plumbing(plumbed.host_ifname, plumbed.host_mac, plumbed.pod_mac,
                     plumbed.mtu)
    try:
        _settle(ipam, alloc)
        ipam.plumbed(cid, ifname, netconf=digest, plumbing=facts)
    except BaseException:
        _unplumb_quietly(binding, cid, ifname)
        _release_quietly(ipam, cid, ifname)
        raise
    LOG.info("ADD %s/%s: %s in %s", cid, ifname, alloc.address, request.netns)
    return _render(request, alloc, facts), True


def replay(request: Request, existing: Allocation,
           digest: str) -> dict[str, Any]:
    """The recorded result of a finished attachment, for the same request
    sent again; 102 for anything else (nothing changes)."""
    where = f"{existing.container_id}/{existing.ifname}"
    if existing.netns != request.netns:
        raise errors.AlreadyExists(
            f"{where} is already attached in netns {existing.netns}")
    if existing.plumbing is None or existing.netconf is None:
        raise errors.AlreadyExists(
            f"{where} already has an address (recorded by an older "
            "kuryr-supervisor: its result cannot be replayed)")
    if existing.netconf != digest:
        raise errors.AlreadyExists(
            f"{where} is already attached with another network "
            "configuration")
    LOG.info("ADD %s: replayed (%s in %s)", where, existing.address,
             existing.netns)
    return _render(request, existing, existing.plumbing)


def repair(ipam: Ipam, binding: Binding, request: Request,
           existing: Allocation) -> None:
    """Roll back a dead ADD's ``pending`` attachment (unplumb whatever
    exists, release) so the caller can do the ADD afresh; 102 and nothing
    changed when it was meant for another netns."""
    where = f"{existing.container_id}/{existing.ifname}"
    if existing.netns != request.netns:
        raise errors.AlreadyExists(
            f"{where} is already being attached in netns {existing.netns}")
    LOG.warning("ADD %s: rolling back a half-done earlier ADD (%s in %s) "
                "before doing it afresh", where, existing.address,
                existing.netns)
    binding.unplumb(container_id=existing.container_id,
                    ifname=existing.ifname, netns=None)
    ipam.release(existing.container_id, existing.ifname)


def _render(request: Request, alloc: Allocation,
            facts: Plumbing) -> dict[str, Any]:
    return results.add_result(
        request, host_ifname=facts.host_ifname, host_mac=facts.host_mac,
        pod_mac=facts.pod_mac, mtu=facts.mtu, address=alloc.address,
        gateway=alloc.gateway)


def _settle(ipam: Ipam, alloc: Allocation) -> None:
    """An address source that knows the port's status (the PodPort) waits
    here, plumbed, until it is ACTIVE (``ExternalIpam.settle``); the
    embedded IPAM has no port and no wait."""
    settle = getattr(ipam, "settle", None)
    if settle is not None:
        settle(alloc)


def _release_quietly(ipam: Ipam, cid: str, ifname: str) -> None:
    try:
        ipam.release(cid, ifname)
    except Exception:  # noqa: BLE001 - the original error is what matters
        LOG.exception("could not release the address of %s/%s after a "
                      "failed ADD; GC will reclaim it", cid, ifname)


def _unplumb_quietly(binding: Binding, cid: str, ifname: str) -> None:
    """Plumbing succeeded but recording it failed: undo the plumbing too
    (plumb undoes its own failures)."""
    try:
        binding.unplumb(container_id=cid, ifname=ifname, netns=None)
    except Exception:  # noqa: BLE001 - the original error is what matters
        LOG.exception("could not unplumb %s/%s after a failed ADD; GC will "
                      "remove it", cid, ifname)
