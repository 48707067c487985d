"""What the network_policy handler tells: Events on the NetworkPolicies,
the figures in shared memory (``/metrics``, ``kuryr-supervisor status``,
readiness), the log, each once per change.

A policy is, after each pass:

- *applied*: its groups, the address groups they name and its pods'
  ports are as it asks (Normal Event ``PolicyApplied``, said when it
  becomes so: first, or after it failed or waited for Neutron);
- *failed*: Neutron refuses something it needs (a quota met, a
  conflict): Warning Event ``PolicyFailed`` with Neutron's words, said
  again only when they change; tried again with backoff;
- *pending*: something it needs waits (a pod's port not made yet, a
  group a failed change left, Neutron not answering): no Event but for
  Neutron's outage (Warning ``PolicyPending``, once per outage); counted.

Neutron's state (answering, down, refusing) goes to the board, which the
``network-policy`` readiness check names; an outage is logged once.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from kuryr_supervisor.controller.policy.spec import Policy
from kuryr_supervisor.kubernetes import events
from kuryr_supervisor.state.policystats import PolicyBoard

LOG = logging.getLogger(__name__)

REASONS = ("PolicyApplied", "PolicyFailed", "PolicyPending")
API_VERSION = "networking.k8s.io/v1"


class PolicyReport:
    """See the module; ``board`` None (no daemon): no figures."""

    def __init__(self, recorder: events.EventRecorder,
                 board: PolicyBoard | None) -> None:
        self.recorder, self.board = recorder, board
        #: policy uid -> (state, what was said)
        self._told: dict[str, tuple[str, str]] = {}
        self._neutron = "ok"

    def start(self) -> None:
        self.recorder.start()

    def stop(self) -> None:
        self.recorder.stop()

    def _event(self, policy: Policy, reason: str, message: str, *,
               warning: bool = False) -> None:
        (LOG.warning if warning else LOG.info)(
            "NetworkPolicy %s/%s: %s", policy.namespace, policy.name, message)
        self.recorder.record(events.Note(
            "Warning" if warning else "Normal", reason, message[:1024],
            key=policy.uid, subject=events.Subject(
                "NetworkPolicy", policy.name, policy.namespace,
                api_version=API_VERSION, uid=policy.uid)))

    def states(self, policies: Iterable[Policy], failed: Mapping[str, str],
               pending: Iterable[str], outage: str = "", *,
               quiet: bool = False) -> dict[str, int]:
        """Each policy's state after a pass (see the module); the counts
        by state, also on the board. ``quiet``: a policy applied is not
        said (a restart's first pass that wrote nothing: it was said
        before)."""
        waiting = set(pending)
        counts = {"applied": 0, "pending": 0, "failed": 0}
        seen = set()
        for policy in policies:
            seen.add(policy.uid)
            before = self._told.get(policy.uid, ("", ""))
            error = failed.get(policy.uid) or failed.get("*")
            if error:
                counts["failed"] += 1
                if before != ("failed", error):
                    self._event(policy, "PolicyFailed", "Neutron refuses "
                                f"what it needs: {error}", warning=True)
                    self._told[policy.uid] = ("failed", error)
            elif outage or policy.uid in waiting or "*" in waiting:
                counts["pending"] += 1
                if outage and before[0] != "outage":
                    self._event(policy, "PolicyPending", "waits for "
                                f"Neutron: {outage}", warning=True)
                    self._told[policy.uid] = ("outage", outage)
                elif not outage and before[0] == "":
                    self._told[policy.uid] = ("pending", "")
            else:
                counts["applied"] += 1
                if before[0] != "applied" and not quiet:
                    self._event(policy, "PolicyApplied", "applied: its "
                                "security groups, the address groups they "
                                "name and the ports of the pods it selects "
                                "are as it asks")
                self._told[policy.uid] = ("applied", "")
        for uid in set(self._told) - seen:
            del self._told[uid]
        if self.board is not None:
            self.board.gauges(counts)
        return counts

    def neutron(self, state: str, why: str = "") -> None:
        """Neutron answers (``ok``), does not (``down``) or refuses
        (``refusing``): logged once per change, on the board."""
        if state != self._neutron:
            if state == "ok":
                LOG.info("Neutron answers the NetworkPolicy writes again")
            else:
                LOG.warning("NetworkPolicies wait: Neutron %s: %s",
                            "does not answer" if state == "down"
                            else "refuses", why)
        self._neutron = state
        if self.board is not None:
            self.board.neutron(state)

    def wrote(self, writes: Mapping[str, int]) -> None:
        if self.board is not None:
            for kind, count in writes.items():
                self.board.wrote(kind, count)

    def refused(self, count: int) -> None:
        if self.board is not None:
            for _ in range(count):
                self.board.refused()
