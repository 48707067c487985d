"""What one port list says to do: the resync's plan and its sweep.

The handler lists the controller's ports once per resync (never a GET per
pod); these functions turn that list into work, as plain functions over
the handler's state so they are tested without any server.

The rules, so that a pod's address never changes under it:

- A pod whose PodPort is written keeps the port its PodPort names (by id,
  or by the PodPort's address and MAC: a vanished port made again as it
  was, whose id the PodPort is then made to name: *repoint*). Its PodPort
  is not rewritten otherwise; any other port of that pod (a late commit
  of a create whose answer was lost, a second replica's) is a duplicate
  and is deleted.
- If the list lacks that port, the list is not proof that it is gone
  (Neutron answered an empty list once after a restart): the pod goes to
  *verify*, and the handler asks Neutron for the port by id before it does
  anything for that pod.
- A pod without a PodPort adopts the oldest of its ports, or waits while a
  create for it may still commit (*waiting*), or is put down for creation.
- The sweep deletes only what the list proves is ours (:func:`proven`:
  every port carries the cluster tag, so Neutron honoured the tag filter):
  a kept pod's other ports, and every port of a pod that is gone, and a
  pod is gone only once a consistent read says so (``confirm``: the pod
  list may come from a watch cache that lags): a port of a pod the list
  lacks but the API server has is left alone.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.ports.book import Named, PodBook, PodRecord

LOG = logging.getLogger(__name__)

#: uid -> the pod's record
Pods = Mapping[str, PodRecord]
ByDevice = dict[str, list[osa.Port]]


def by_device(ports: Iterable[osa.Port]) -> ByDevice:
    """Ports grouped by device (pod UID), oldest first."""
    out: ByDevice = {}
    for port in sorted(ports, key=lambda p: (p.created_at, p.id)):
        out.setdefault(port.device_id, []).append(port)
    return out


def proven(ports: list[osa.Port], tag: str) -> tuple[list[osa.Port], bool]:
    """The ports that carry ``tag``, and whether all did: a list that
    holds a port without it was not filtered by tag (a Neutron that
    ignores the filter), so it proves nothing about what is ours."""
    ours = [p for p in ports if tag in p.tags]
    return ours, len(ours) == len(ports)


def is_named(port: osa.Port, named: Named) -> bool:
    port_id, ip, mac = named
    return port.id == port_id or (
        str(port.ip) == ip and port.mac.lower() == mac.lower())


@dataclasses.dataclass
class Plan:
    create: list[str] = dataclasses.field(default_factory=list)
    #: (pod, port) whose PodPort to write (a port adopted, not yet named)
    write: list[tuple[str, osa.Port]] = dataclasses.field(default_factory=list)
    #: pods whose named port the list lacks: ask Neutron by id first
    verify: list[str] = dataclasses.field(default_factory=list)
    #: pods whose create may still commit: nothing is done for them
    waiting: list[str] = dataclasses.field(default_factory=list)
    #: pod -> the one port it keeps (the sweep deletes its others)
    keep: dict[str, str] = dataclasses.field(default_factory=dict)
    #: (pod, port) whose written PodPort names the port's address and MAC
    #: under another id (the port was made again): named from now on
    repoint: list[tuple[str, osa.Port]] = dataclasses.field(
        default_factory=list)


def plan(need: Iterable[str], book: PodBook, listed: ByDevice,
         now: float) -> Plan:
    """The work for the pods ``need`` (see the module). Updates their
    records: the port each keeps, and whether its PodPort is written (a
    pod whose PodPort must be written is no longer written)."""
    out = Plan()
    for uid in need:
        pod = book.get(uid)
        if pod is None:
            continue
        ports = listed.get(uid) or []
        mine = pod.named
        if mine is not None:
            kept = [p for p in ports if is_named(p, mine)]
            if kept:
                pod.keeps(kept[0].id)
                out.keep[uid] = kept[0].id
                if kept[0].id != mine.port_id:
                    out.repoint.append((uid, kept[0]))
            else:
                out.verify.append(uid)
            continue
        if ports:
            pod.adopts(ports[0].id)
            out.write.append((uid, ports[0]))
            out.keep[uid] = ports[0].id
        elif pod.inflight > now:
            out.waiting.append(uid)
        else:
            pod.unwritten()
            out.create.append(uid)
    return out


def no_confirm(devices: set[str]) -> set[str]:
    """Every pod the list lacks is gone (a list known consistent)."""
    return devices


def sweep(cloud: osa.OpenStack, listed: ByDevice, live: Pods,
          keep: Mapping[str, str], beat: Callable[[], None],
          confirm: Callable[[set[str]], set[str]] = no_confirm) -> int:
    """Delete a live pod's ports but the one it keeps (pods without a
    decision are left alone) and every port of a pod that is gone, once
    ``confirm`` (the devices the list lacks -> those confirmed gone)
    says so; an outage only postpones it to the next resync. The ports
    deleted."""
    deleted = 0
    lacking = {d for d in listed if d not in live}
    try:
        gone = confirm(lacking) if lacking else set()
    except Exception as exc:  # noqa: BLE001 - nothing of theirs deleted
        LOG.warning("ports of %d pods the pod list lacks kept: whether the "
                    "pods are gone is not known (%s)", len(lacking), exc)
        gone = set()
    try:
        for device, ports in listed.items():
            alive = device in live
            if alive and device not in keep or \
                    not alive and device not in gone:
                continue
            for port in ports:
                if alive and port.id == keep[device]:
                    continue
                cloud.delete_port(port.id)
                deleted += 1
                if alive:
                    LOG.warning("pod %s had %d ports; deleted %s, kept %s",
                                device, len(ports), port.id, keep[device])
                else:
                    LOG.info("deleted leaked port %s (pod %s is gone)",
                             port.id, device)
                beat()
    except osa.OpenStackError as exc:
        LOG.warning("port sweep postponed: %s", exc)
    return deleted
