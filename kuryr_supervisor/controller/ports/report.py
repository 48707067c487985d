"""What the port handler cannot fix, told to the operator: the pod's
Events, the shared fault bits (``/status``, ``/metrics``, readiness) and
the log, each once per change.

- A full pod subnet (Neutron's 409 ``IpAddressGenerationFailure``) is a
  dependency's refusal, like a full quota: the controller is not ready
  (the ``neutron-ports`` check names the subnet), stays live, and each
  waiting pod gets a Warning Event ``PortSubnetFull``.
- A Neutron that does not honour the tag filter makes the sweep stop
  (it could not prove which ports are ours); said once, and shown in
  ``/status`` and ``/metrics``; ports are still created.
- A pod whose port vanished and cannot be made again with its address and
  MAC gets a Warning Event ``PortLost`` and is left alone; one made again
  (its PodPort then names the new port) gets a Normal Event
  ``PortRecreated``.
- A refusal no restart fixes (the pod network or subnet deleted, a policy
  that forbids the creates) is an outage: not ready naming Neutron and
  what is missing (the ``neutron-ports`` check), each waiting pod gets a
  Warning Event (``PodNetworkMissing``, ``PodSubnetMissing``,
  ``PortCreateForbidden``), nothing is counted.
- A pod list that lacked pods a consistent read has (the API server's
  watch cache lagging): their ports are kept, said once in the log and in
  ``/status`` until the pods arrive.
- How Neutron lets ports be made (tags at create or after, derived MACs
  or Neutron's, bound or not) goes to the shared state's modes, for
  readiness to say.

Events are posted in the handler's loop, one per pod and reason (a bounded
memory of what was said), so a long outage does not repeat them.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.openstack.making import Modes
from kuryr_supervisor.controller.ports.book import PodRecord
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.events import SOURCE, rfc3339
from kuryr_supervisor.state import Fault, Mode, SharedState

LOG = logging.getLogger(__name__)

#: Pods remembered as told (per reason); older ones may be told again.
MEMORY = 10_000
#: The Events' reasons.
REASONS = ("PortSubnetFull", "PortLost", "PortBindingFailed",
           "PortRecreated", "PodNetworkMissing", "PodSubnetMissing",
           "PortCreateForbidden")
#: A refusal no restart fixes: its fault bit and its Events' reason.
UNFIXABLE = ((wire.NetworkMissing, Fault.NETWORK_MISSING, "PodNetworkMissing"),
             (wire.SubnetMissing, Fault.SUBNET_MISSING, "PodSubnetMissing"),
             (wire.Forbidden, Fault.NEUTRON_FORBIDS, "PortCreateForbidden"))


class PortReport:
    """See the module; ``state`` None (tests, no daemon): no fault bits."""

    def __init__(self, client: k8s.K8sClient,
                 state: SharedState | None) -> None:
        self.client, self.state = client, state
        self._told: dict[tuple[str, str], None] = {}
        self._faults = Fault.NONE

    def fault(self, fault: Fault, present: bool, why: str = "") -> None:
        """Raise or clear a fault bit, logging the change once."""
        if (fault in self._faults) == present:
            return
        self._faults = (self._faults | fault) if present else (
            self._faults & ~fault)
        if self.state is not None:
            self.state.set_fault(fault, present)
        if present:
            LOG.warning("%s: %s", fault.name, why)
        else:
            LOG.info("%s cleared", fault.name)

    def sweep_proven(self, proven: bool) -> None:
        self.fault(Fault.SWEEP_UNPROVEN, not proven,
                   "Neutron answered a port list filtered by the cluster tag "
                   "with ports that lack the tag; the sweep deletes nothing "
                   "until a list proves which ports are ours")

    def subnet_full(self, pods: Iterable[PodRecord],
                    why: str) -> None:
        """``pods`` wait for an address."""
        self.fault(Fault.SUBNET_FULL, True, why)
        for pod in pods:
            self.event(pod.uid, pod.namespace, pod.name, "PortSubnetFull",
                       f"no Neutron port: the pod subnet has no free "
                       f"address ({why[:200]}); the pod waits")

    def fault_lost(self, uid: str, namespace: str, name: str,
                   why: str) -> None:
        """A pod's port vanished for good (see :mod:`.verify`)."""
        self.fault(Fault.PORT_LOST, True, f"pod {namespace}/{name}: {why}")
        self.event(uid, namespace, name, "PortLost", why)

    def refused(self, pods: Iterable[PodRecord],
                exc: Exception) -> bool:
        """``pods`` wait for a port Neutron
        refuses in a way no restart fixes (``exc``); False when ``exc`` is
        no such refusal."""
        for kind, fault, reason in UNFIXABLE:
            if isinstance(exc, kind):
                self.fault(fault, True, f"Neutron: {exc}")
                for pod in pods:
                    self.event(pod.uid, pod.namespace, pod.name, reason,
                               f"no Neutron port: {str(exc)[:300]}; the "
                               f"pod waits")
                return True
        return False

    def made(self) -> None:
        """A port was made: Neutron refuses no longer."""
        for _, fault, _ in UNFIXABLE:
            self.fault(fault, False)

    def lagging(self, missing: int) -> None:
        """A pod list lacked ``missing`` pods a consistent read has (0:
        it lacks none now)."""
        self.fault(Fault.PODS_LAGGING, missing > 0,
                   f"the pod list (the API server's watch cache) is "
                   f"lagging: {missing} pods a consistent read has were not "
                   f"in it; their ports are kept, nothing is deleted or made "
                   f"for them until the pods arrive")

    def made_with(self, modes: Modes) -> None:
        """How Neutron lets ports be made (the port maker's ``on_change``),
        for readiness to say."""
        mode = Mode.NONE
        if modes.tags_at_create is not None:
            mode |= Mode.TAGS_AT_CREATE if modes.tags_at_create else \
                Mode.TAGS_AFTER_CREATE
        if modes.macs is not None:
            mode |= Mode.MACS_DERIVED if modes.macs else Mode.MACS_NEUTRONS
        if not modes.bind:
            mode |= Mode.UNBOUND
        self.modes(mode)

    def modes(self, modes: Mode) -> None:
        """How ports are made now (see the module)."""
        if self.state is None:
            return
        for mode in Mode:
            if mode:
                self.state.set_mode(mode, mode in modes)

    def event(self, uid: str, namespace: str, name: str, reason: str,
              message: str, *, kind: str = "Warning") -> None:
        """An Event on the pod (a Warning unless ``kind`` says), once per
        pod and reason."""
        key = (uid, reason)
        if key in self._told:
            return
        self._told[key] = None
        while len(self._told) > MEMORY:
            self._told.pop(next(iter(self._told)))
        try:
            self.client.events.create(pod_event(
                uid, namespace, name, reason, message, kind=kind),
                namespace=namespace)
        except k8s.K8sError as exc:
            LOG.info("Event %s on pod %s/%s not posted: %s", reason,
                     namespace, name, exc)

    def forget(self, uid: str, reason: str = "") -> None:
        """The pod is gone (or, with ``reason``, may be told again)."""
        for told in (reason,) if reason else REASONS:
            self._told.pop((uid, told), None)


def pod_event(uid: str, namespace: str, name: str, reason: str,
              message: str, *, wall: float | None = None,
              kind: str = "Warning") -> Mapping[str, Any]:
    now = rfc3339(time.time() if wall is None else wall)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}"[:253],
                     "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name,
                           "namespace": namespace, "uid": uid},
        "type": kind, "reason": reason, "message": message[:1024],
        "source": {"component": SOURCE}, "reportingComponent": SOURCE,
        "reportingInstance": SOURCE, "count": 1, "firstTimestamp": now,
        "lastTimestamp": now}
