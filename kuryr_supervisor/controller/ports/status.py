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
  round. A round asks in a thread of its own, one round at a time, and
  what it found is written at the handler's next tick (:meth:`wake_in`
  brings that tick): Neutron answers a burst's GETs slowly, and a round
  asked in the handler's thread held up every pod that arrived meanwhile
  (a burst served from warm pools got its PodPorts two by two, one round
  apart);
- a BINDING_FAILED port is reported on its pod (a Warning Event
  ``PortBindingFailed``).
"""
from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.ports.book import PodRecord
from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import podport

LOG = logging.getLogger(__name__)

#: Seconds after its creation a port's status is polled at most.
POLL_FOR = 120.0
#: Ports asked for by id in one poll round at most.
POLL_MAX = 20
#: Statuses that end the poll.
SETTLED = ("ACTIVE", "BINDING_FAILED", "ERROR")
#: Seconds between two looks at a round still asking (:meth:`PortStatus.wake_in`).
ROUND_CHECK = 0.05

#: What a round found: (pod UID, port id, the port or None: Neutron's 404).
Found = list[tuple[str, str, osa.Port | None]]


def differs(said: str, state: str) -> bool:
    """Whether a PodPort that says ``said`` must be told ``state``: a
    PodPort that says nothing says DOWN (to the CNI role both are a port
    not yet ACTIVE)."""
    return (said or "DOWN") != (state or "DOWN")


class PortStatus:
    """What each PodPort says of its port's status, and the poll."""

    def __init__(self, report: PortReport, *,
                 said: dict[str, str] | None = None,
                 busy: Collection[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``said``: uid -> the status its PodPort says (shared with the
        writer of new ports' statuses, which fills it in); ``busy``: the
        uids whose status that writer is writing (not written here
        meanwhile)."""
        self.report = report
        self.said: dict[str, str] = {} if said is None else said
        #: uids whose status is being written elsewhere (a new port's)
        self.busy = busy
        self.polling: dict[str, tuple[str, float]] = {}   # uid -> (port, since)
        self._clock = clock
        self._polled_at = 0.0
        self._round: concurrent.futures.Future[Found] | None = None
        self._asker: concurrent.futures.ThreadPoolExecutor | None = None

    def forget(self, uid: str) -> None:
        self.said.pop(uid, None)
        self.polling.pop(uid, None)

    def made(self, uid: str, port_id: str) -> None:
        """A new port's PodPort was written (saying nothing yet; its
        status, written in the background, is set in :attr:`said` when
        it is): poll it for a while."""
        self.said.setdefault(uid, "")
        self.polling[uid] = (port_id, self._clock())

    def seen(self, client: k8s.K8sClient, pods: Mapping[str, PodRecord],
             ports: Iterable[tuple[str, osa.Port]],
             beat: Callable[[], None]) -> None:
        """``ports`` ((uid, its kept port)) as Neutron lists them: write
        what changed."""
        for uid, port in ports:
            state = port.state
            if uid in pods and uid not in self.busy and \
                    differs(self.said.get(uid, ""), state):
                pod = pods[uid]
                self._write(client, uid, (pod.namespace, pod.name), state,
                            port.id)
                beat()
            if state in SETTLED:
                self.polling.pop(uid, None)

    def poll(self, cloud: osa.OpenStack, client: k8s.K8sClient,
             pods: Mapping[str, PodRecord], interval: float,
             beat: Callable[[], None]) -> None:
        """What the last round found written, then the next round started
        when due (see the module); never waits for Neutron."""
        self._take(client, pods, beat)
        now = self._clock()
        if self._round is not None or interval <= 0 or not self.polling \
                or now - self._polled_at < interval:
            return
        self._polled_at = now
        ask = []
        for uid, (port_id, since) in list(self.polling.items())[:POLL_MAX]:
            if uid not in pods or now - since > POLL_FOR:
                self.polling.pop(uid, None)
                continue
            ask.append((uid, port_id))
        if not ask:
            return
        if self._asker is None:
            self._asker = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="port-status")
        # Direct calls in the round's thread: none queues behind, or holds
        # up, the handler's own calls on the adapter's call path.
        self._round = self._asker.submit(_ask, cloud.within(cloud.timeout),
                                         ask)

    def wake_in(self) -> float:
        """Seconds until the handler should tick to write what a round
        found (inf: no round asking)."""
        return float("inf") if self._round is None else ROUND_CHECK

    def _take(self, client: k8s.K8sClient,
              pods: Mapping[str, PodRecord],
              beat: Callable[[], None]) -> None:
        """A finished round's ports, for the pods still polled for them."""
        done = self._round
        if done is None or not done.done():
            return
        self._round = None
        for uid, port_id, port in done.result():
            if self.polling.get(uid, ("", 0.0))[0] != port_id:
                continue            # settled, forgotten or replaced since
            if port is None:
                self.polling.pop(uid, None)     # the resync will see to it
                continue
            self.seen(client, pods, [(uid, port)], beat)

    def _write(self, client: k8s.K8sClient, uid: str, where: tuple[str, str],
               state: str, port_id: str) -> None:
        namespace, name = where
        try:
            client.podports.patch(
                name, podport.status_patch({"portStatus": state}),
                namespace=namespace, subresource="status")
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


def _ask(cloud: osa.NeutronApi, ask: list[tuple[str, str]]) -> Found:
    """One round: each port of ``ask`` ((pod UID, port id)) by id, until
    Neutron fails (the rest wait for the next round)."""
    found: Found = []
    for uid, port_id in ask:
        try:
            found.append((uid, port_id, cloud.port(port_id)))
        except osa.OpenStackError as exc:
            LOG.debug("status poll postponed: %s", exc)
            break
    return found
