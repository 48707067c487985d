"""A port's status, carried into its PodPort's ``status.portStatus``.

Neutron says DOWN until an agent (or mechanism driver) has bound the port
to its host and wired it, then ACTIVE; a port no driver could bind has
``binding:vif_type`` ``binding_failed`` (BINDING_FAILED here). The CNI
role may wait for ACTIVE (``[cni_daemon] wait_for_active_port``), and
refuses a BINDING_FAILED port at once, so the status must reach the
PodPort:

- a new port's status is written right after its PodPort is made, when
  Neutron says more than DOWN (a PodPort that says nothing says DOWN);
- every resync compares each kept port's status in the list with what its
  PodPort says (read at start with the PodPorts, so a restart writes
  nothing that is already said), and writes only a difference (status
  subresource, a merge patch: the spec is never touched);
- with ``[controller] port_status_interval`` > 0, the ports made in the
  last :data:`POLL_FOR` seconds whose status is not settled yet are also
  asked for by id every that many seconds, at most :data:`POLL_MAX` a
  round (off by default: without an agent a port stays DOWN, and a poll
  would only load Neutron);
- a BINDING_FAILED port is reported on its pod (a Warning Event
  ``PortBindingFailed``).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.kubernetes import client as k8s

LOG = logging.getLogger(__name__)

#: Seconds after its creation a port's status is polled at most.
POLL_FOR = 120.0
#: Ports asked for by id in one poll round at most.
POLL_MAX = 20
#: Statuses that end the poll.
SETTLED = ("ACTIVE", "BINDING_FAILED", "ERROR")


def differs(said: str, state: str) -> bool:
    """Whether a PodPort that says ``said`` must be told ``state``: a
    PodPort that says nothing says DOWN (to the CNI role both are a port
    not yet ACTIVE)."""
    return (said or "DOWN") != (state or "DOWN")


class PortStatus:
    """What each PodPort says of its port's status, and the poll."""

    def __init__(self, report: PortReport, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.report = report
        self.said: dict[str, str] = {}            # uid -> status written
        #: uids whose status is being written elsewhere (a new port's)
        self.busy: Collection[str] = ()
        self.polling: dict[str, tuple[str, float]] = {}   # uid -> (port, since)
        self._clock = clock
        self._polled_at = 0.0

    def forget(self, uid: str) -> None:
        self.said.pop(uid, None)
        self.polling.pop(uid, None)

    def made(self, uid: str, port_id: str) -> None:
        """A new port's PodPort was written (saying nothing yet; its
        status, written in the background, is set in :attr:`said` when
        it is): poll it for a while."""
        self.said.setdefault(uid, "")
        self.polling[uid] = (port_id, self._clock())

    def seen(self, client: k8s.K8sClient, pods: dict[str, tuple[str, str, str]],
             ports: Iterable[tuple[str, osa.Port]],
             beat: Callable[[], None]) -> None:
        """``ports`` ((uid, its kept port)) as Neutron lists them: write
        what changed."""
        for uid, port in ports:
            state = port.state
            if uid in pods and uid not in self.busy and \
                    differs(self.said.get(uid, ""), state):
                self._write(client, uid, pods[uid][:2], state, port.id)
                beat()
            if state in SETTLED:
                self.polling.pop(uid, None)

    def poll(self, cloud: osa.OpenStack, client: k8s.K8sClient,
             pods: dict[str, tuple[str, str, str]], interval: float,
             beat: Callable[[], None]) -> None:
        """One poll round, when due (see the module)."""
        now = self._clock()
        if interval <= 0 or not self.polling or now - self._polled_at < interval:
            return
        self._polled_at = now
        for uid, (port_id, since) in list(self.polling.items())[:POLL_MAX]:
            if uid not in pods or now - since > POLL_FOR:
                self.polling.pop(uid, None)
                continue
            try:
                port = cloud.port(port_id)
            except osa.OpenStackError as exc:
                LOG.debug("status poll postponed: %s", exc)
                return
            if port is None:
                self.polling.pop(uid, None)     # the resync will see to it
                continue
            self.seen(client, pods, [(uid, port)], beat)

    def _write(self, client: k8s.K8sClient, uid: str, where: tuple[str, str],
               state: str, port_id: str) -> None:
        namespace, name = where
        try:
            client.patch_podport_status(namespace, name, {"portStatus": state})
        except k8s.K8sError as exc:
            LOG.info("status of PodPort %s/%s not written: %s", namespace,
                     name, exc)
            return
        self.said[uid] = state
        if state == "BINDING_FAILED":
            self.report.event(uid, namespace, name, "PortBindingFailed",
                              f"Neutron failed to bind port {port_id} "
                              f"(binding:vif_type binding_failed); the CNI "
                              f"ADD is refused until it is bound")
