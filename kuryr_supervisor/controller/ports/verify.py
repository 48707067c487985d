"""A written PodPort's port the port list lacks: gone, or only not listed?

A port list that lacks a port is never proof that it is gone: a Neutron
just restarted answered the controller's filtered list once with 200 and
no port at all. So before anything is done for such a pod, Neutron is
asked for the port by id (:func:`verify`):

- it exists: the list was incomplete; the pod keeps its port, and the
  rest of this resync's pods to verify, create or sweep wait for a list
  that can be trusted (one GET, not one per pod, proves the list wrong);
- it is gone (404: an admin deleted it) and the pod is bound (the PodPort
  says ``status.boundAt``, read again now): it is made again with the same
  fixed IP and MAC, the same device, name and tags, bound to the pod's
  node (through the one path every port is made by,
  :mod:`~kuryr_supervisor.controller.openstack.making`), so the address
  the pod holds stays reserved to it; Neutron gives it a new id, which the
  PodPort is then made to name (:func:`repoint`: its address, MAC and
  status unchanged), so the node re-points the pod's interface to it
  (OVN and the OVS agent bind a port by the id the interface names); a
  Normal Event ``PortRecreated`` on the pod says so;
- it is gone and the pod is not bound yet (or the PodPort was never the
  controller's: nothing a PodPort says is proof of a port): the pod gets a
  new port, and its PodPort is rewritten;
- either way, beside the ``network_policy`` handler, the port is made in
  its pod's policies' groups (:mod:`.guard`), never in the default group
  when a policy selects the pod; the groups not known (the policies not
  listed yet, a group not made): in the groups made, possibly none (it
  admits nothing until the policy handler's next pass);
- Neutron refuses that (the address or MAC was taken meanwhile, or policy
  forbids choosing a MAC): the pod is reported (a Warning Event
  ``PortLost``, the ``PORT_LOST`` fault in ``/status`` and ``/metrics``)
  and left alone: no other port of it is touched, nothing is re-pointed.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.openstack.making import PortMaker, Want
from kuryr_supervisor.controller.ports import podports
from kuryr_supervisor.controller.ports.book import Named, PodBook
from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.controller.ports.resync import Plan
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import podport

LOG = logging.getLogger(__name__)


def defaults(uid: str) -> tuple[str, ...] | None:
    """Every pod's port in the project's default group (no
    ``network_policy`` handler)."""
    return None


@dataclasses.dataclass(frozen=True)
class Where:
    """How a port is made again: by ``maker``, with the cluster's
    ``tag``, bound to its pod's node (``hosts``: pod UID -> node), in
    its security groups (``groups``: pod UID -> its groups, None: the
    project's default group; beside the ``network_policy`` handler, a
    pod's policies' groups, :mod:`.guard`)."""

    maker: PortMaker
    tag: str
    hosts: Callable[[str], str]
    groups: Callable[[str], tuple[str, ...] | None] = defaults


def verify(cloud: osa.OpenStack, client: k8s.K8sClient, plan: Plan,
           book: PodBook, where: Where, report: PortReport,
           beat: Callable[[], None]) -> tuple[bool, list[str]]:
    """Settle ``plan.verify`` (see the module), filling ``plan.keep`` and,
    for pods not bound whose port is gone, ``plan.create``. Returns
    (whether the list proved incomplete, the pods to try again: an outage,
    or not verified because the list was)."""
    again: list[str] = []
    incomplete = False
    for i, uid in enumerate(plan.verify):
        beat()
        pod = book.pods[uid]
        mine = pod.named
        if mine is None:                # the plan verifies what is named
            continue
        port_id, ns, name = mine.port_id, pod.namespace, pod.name
        try:
            port = cloud.port(port_id)
        except osa.OpenStackError as exc:
            LOG.warning("pod %s/%s: port %s not verified: %s", ns, name,
                        port_id, exc)
            again += plan.verify[i:]
            break
        if port is not None:
            LOG.warning("the port list lacked port %s of pod %s/%s, which "
                        "Neutron still has: the list is not trusted this "
                        "time", port_id, ns, name)
            plan.keep[uid] = port.id
            pod.wrote()
            incomplete = True
            again += plan.verify[i + 1:]
            break
        try:
            current = client.podports.get(name, namespace=ns)
        except k8s.K8sError as exc:
            LOG.warning("pod %s/%s: PodPort not read: %s", ns, name, exc)
            again.append(uid)
            continue
        if current is None or not podport.bound_at(current):
            LOG.info("pod %s/%s: port %s is gone and the pod is not bound: "
                     "a new port", ns, name, port_id)
            pod.lost()
            plan.create.append(uid)
            continue
        again += _remake(cloud, uid, mine, plan, book, where, report)
    return incomplete, again


def _remake(cloud: osa.OpenStack, uid: str, mine: Named, plan: Plan,
            book: PodBook, where: Where, report: PortReport) -> list[str]:
    """The port is gone: make it again as it was (see the module)."""
    port_id, ip, mac = mine
    pod = book.pods[uid]
    ns, name = pod.namespace, pod.name
    try:
        [port] = where.maker.make(
            [Want(wire.port_name(where.tag, f"{ns}/{name}"), uid,
                  host=where.hosts(uid), ip=ip, mac=mac,
                  groups=where.groups(uid))],
            tags=[where.tag] if where.tag else [], timeout=cloud.timeout)
    except osa.OpenStackRefused as exc:
        LOG.error("pod %s/%s: its port %s vanished and Neutron refused to "
                  "make it again with %s and %s: %s; the pod is left alone",
                  ns, name, port_id, ip, mac, exc)
        report.fault_lost(uid, ns, name, f"port {port_id} vanished and "
                          f"cannot be made again with address {ip} and MAC "
                          f"{mac}: {exc}")
        return []
    except osa.OpenStackError as exc:
        LOG.warning("pod %s/%s: port %s not made again yet: %s", ns, name,
                    port_id, exc)
        return [uid]
    LOG.warning("pod %s/%s: its port %s vanished; made %s again with the "
                "same address %s and MAC %s, bound to %s", ns, name, port_id,
                port.id, ip, mac, port.host or where.hosts(uid) or "no node")
    pod.keeps(port.id)
    plan.keep[uid] = port.id
    plan.repoint.append((uid, port))
    return []


def repoint(client: k8s.K8sClient, plan: Plan, book: PodBook,
            report: PortReport, beat: Callable[[], None]) -> list[str]:
    """The PodPorts of ``plan.repoint`` name their pod's port made again
    (same address and MAC, a new id), and each pod gets a Normal Event
    ``PortRecreated``: the node re-points the pod's interface to it. The
    pods to try again (the API refused or was out)."""
    again = []
    for uid, port in plan.repoint:
        beat()
        pod = book.pods[uid]
        ns, name, old = pod.namespace, pod.name, pod.named
        if old is None:
            continue
        try:
            kept = podports.repoint(client, ns, name, old, port.id,
                                    port.host or pod.node)
        except k8s.K8sError as exc:
            LOG.warning("pod %s/%s: PodPort not yet re-pointed to port %s: "
                        "%s", ns, name, port.id, exc)
            again.append(uid)
            continue
        if kept is not None:            # it says otherwise by now
            pod.names(kept.named)
            continue
        pod.names(old._replace(port_id=port.id))
        report.forget(uid, "PortRecreated")
        report.event(uid, ns, name, "PortRecreated",
                     f"Neutron port {old.port_id} vanished; port {port.id} "
                     f"was made again with the same address {old.ip} and "
                     f"MAC {old.mac}, bound to {port.host or 'its node'}; the "
                     f"node re-points the pod's interface to it",
                     kind="Normal")
    return again
