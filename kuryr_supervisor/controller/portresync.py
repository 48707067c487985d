"""What one port list says to do: the resync's plan and its sweep.

The handler lists the controller's ports once per resync (never a GET per
pod); these functions turn that list into work, as plain functions over
the handler's state so they are tested without any server:

- :func:`plan`: for each pod that needs a port, adopt the oldest it has
  (its PodPort is rewritten unless already written with that port), or
  put it down for creation;
- :func:`sweep`: delete a pod's ports after its oldest (a race with a
  second replica) and every port of a pod that is gone (deleted while no
  controller ran). Only ports of the list are touched, and the list holds
  only this cluster's (tag, network, project).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kuryr_supervisor.controller import openstack as osa

LOG = logging.getLogger(__name__)

#: uid -> (namespace, name, port id or "")
Pods = dict[str, tuple[str, str, str]]
ByDevice = dict[str, list[osa.Port]]


def by_device(ports: Iterable[osa.Port]) -> ByDevice:
    """Ports grouped by device (pod UID), oldest first."""
    out: ByDevice = {}
    for port in sorted(ports, key=lambda p: (p.created_at, p.id)):
        out.setdefault(port.device_id, []).append(port)
    return out


def plan(need: Iterable[str], pods: Pods, written: set[str],
         listed: ByDevice) -> tuple[list[str], list[tuple[str, osa.Port]]]:
    """(pods to create a port for, (pod, adopted port) whose PodPort to
    write). Updates ``pods`` (adopted port ids) and ``written`` (a pod
    whose port changed or vanished is no longer written)."""
    create: list[str] = []
    write: list[tuple[str, osa.Port]] = []
    for uid in need:
        if uid not in pods:
            continue
        ports = listed.get(uid)
        ns, name, known = pods[uid]
        if not ports:
            written.discard(uid)
            create.append(uid)
        elif known != ports[0].id or uid not in written:
            written.discard(uid)
            pods[uid] = (ns, name, ports[0].id)
            write.append((uid, ports[0]))
    return create, write


def sweep(cloud: osa.OpenStack, listed: ByDevice, live: Pods,
          beat: Callable[[], None]) -> None:
    """Delete extra and leaked ports (see the module); an outage only
    postpones it to the next resync."""
    try:
        for device, ports in listed.items():
            alive = device in live
            for port in ports[1:] if alive else ports:
                cloud.delete_port(port.id)
                if alive:
                    LOG.warning("pod %s had %d ports; deleted %s", device,
                                len(ports), port.id)
                else:
                    LOG.info("deleted leaked port %s (pod %s is gone)",
                             port.id, device)
                beat()
    except osa.OpenStackError as exc:
        LOG.warning("port sweep postponed: %s", exc)
