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
  MAC gets a Warning Event ``PortLost`` and is left alone.

Events are posted in the handler's loop, one per pod and reason (a bounded
memory of what was said), so a long outage does not repeat them.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.events import SOURCE, rfc3339
from kuryr_supervisor.state import Fault, SharedState

LOG = logging.getLogger(__name__)

#: Pods remembered as told (per reason); older ones may be told again.
MEMORY = 10_000
#: The Events' reasons.
REASONS = ("PortSubnetFull", "PortLost", "PortBindingFailed")


class PortReport:
    """See the module; ``state`` None (tests, no daemon): no fault bits."""

    def __init__(self, client: k8s.K8sClient | None,
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

    def subnet_full(self, pods: Iterable[tuple[str, str, str]],
                    why: str) -> None:
        """``pods`` ((uid, namespace, name)) wait for an address."""
        self.fault(Fault.SUBNET_FULL, True, why)
        for uid, ns, name in pods:
            self.event(uid, ns, name, "PortSubnetFull",
                       f"no Neutron port: the pod subnet has no free "
                       f"address ({why[:200]}); the pod waits")

    def fault_lost(self, uid: str, namespace: str, name: str,
                   why: str) -> None:
        """A pod's port vanished for good (see :mod:`.verify`)."""
        self.fault(Fault.PORT_LOST, True, f"pod {namespace}/{name}: {why}")
        self.event(uid, namespace, name, "PortLost", why)

    def event(self, uid: str, namespace: str, name: str, reason: str,
              message: str) -> None:
        """A Warning Event on the pod, once per pod and reason."""
        key = (uid, reason)
        if key in self._told or self.client is None:
            return
        self._told[key] = None
        while len(self._told) > MEMORY:
            self._told.pop(next(iter(self._told)))
        try:
            self.client.create_event(namespace, pod_event(
                uid, namespace, name, reason, message))
        except k8s.K8sError as exc:
            LOG.info("Event %s on pod %s/%s not posted: %s", reason,
                     namespace, name, exc)

    def forget(self, uid: str) -> None:
        """The pod is gone."""
        for reason in REASONS:
            self._told.pop((uid, reason), None)


def pod_event(uid: str, namespace: str, name: str, reason: str,
              message: str, *, wall: float | None = None) -> Mapping[str, Any]:
    now = rfc3339(time.time() if wall is None else wall)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}"[:253],
                     "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name,
                           "namespace": namespace, "uid": uid},
        "type": "Warning", "reason": reason, "message": message[:1024],
        "source": {"component": SOURCE}, "reportingComponent": SOURCE,
        "reportingInstance": SOURCE, "count": 1, "firstTimestamp": now,
        "lastTimestamp": now}
