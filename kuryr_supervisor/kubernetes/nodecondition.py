"""Publish the daemon's health as a Node condition, for node auto-healers.

magnum-auto-healer's NodeCondition check and node-problem-detector users
act on a condition such as ``KuryrCNIHealthy``; acting on a flapping one
would drain healthy nodes, so the publisher damps it:

* it starts ``Unknown`` (a condition left ``True`` by a previous run is
  not trusted until this run has judged);
* healthy turns it ``True`` at once; it turns ``False`` only after the
  daemon has been unhealthy without a break for ``grace`` seconds;
* ``lastTransitionTime`` changes only when ``status`` changes;
* the API is patched only when status or reason change (a new message
  rides along with the next change, so a message carrying live figures
  cannot cause a patch storm); a failed patch is retried no more often
  than every ``retry_interval`` seconds.

Feed it what restarting the node could fix (liveness, netlink, the CNI
failure budget) -- not the API's own reachability, or an API outage would
mark every node unhealthy at once.
"""
from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from oslo_config import cfg

LOG = logging.getLogger(__name__)

Clock = Callable[[], float]
Patch = Callable[[Mapping[str, Any]], None]

REASON_HEALTHY = "KuryrCNIHealthy"
REASON_UNHEALTHY = "KuryrCNIUnhealthy"
REASON_UNKNOWN = "KuryrCNIStarting"


def _rfc3339(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class NodeConditionPublisher:
    """Call :meth:`update` on every health evaluation; it patches rarely."""

    def __init__(self, condition_type: str, patch: Patch, *,
                 grace: float = 60.0, retry_interval: float = 10.0,
                 clock: Clock = time.monotonic,
                 wall: Clock = time.time) -> None:
        self.type = condition_type
        self.grace = grace
        self.retry_interval = retry_interval
        self._patch = patch
        self._clock, self._wall = clock, wall
        self.status = "Unknown"
        self.reason = REASON_UNKNOWN
        self.message = "kuryr-supervisor has not judged its health yet"
        self.last_transition = _rfc3339(wall())
        self._unhealthy_since: float | None = None
        self._published: tuple[str, str] | None = None
        self._last_attempt: float | None = None

    @property
    def condition(self) -> dict[str, str]:
        return {"type": self.type, "status": self.status,
                "reason": self.reason, "message": self.message,
                "lastTransitionTime": self.last_transition,
                "lastHeartbeatTime": _rfc3339(self._wall())}

    def _set(self, status: str, reason: str, message: str) -> None:
        if status != self.status:
            self.last_transition = _rfc3339(self._wall())
            LOG.info("node condition %s: %s -> %s (%s)", self.type,
                     self.status, status, message)
        self.status, self.reason, self.message = status, reason, message

    def update(self, healthy: bool, message: str = "") -> None:
        """Fold one evaluation in; patch the Node if the condition changed."""
        now = self._clock()
        if healthy:
            self._unhealthy_since = None
            self._set("True", REASON_HEALTHY,
                      message or "kuryr-supervisor is healthy")
        else:
            if self._unhealthy_since is None:
                self._unhealthy_since = now
            if now - self._unhealthy_since >= self.grace:
                self._set("False", REASON_UNHEALTHY,
                          message or "kuryr-supervisor is unhealthy")
        self.publish()

    def publish(self) -> bool:
        """Patch if the Node shows another status or reason than ours."""
        wanted = (self.status, self.reason)
        if wanted == self._published:
            return False
        now = self._clock()
        if self._last_attempt is not None and \
                now - self._last_attempt < self.retry_interval and \
                self._published is not None and self._published[0] == \
                "failed":
            return False
        self._last_attempt = now
        try:
            self._patch(self.condition)
        except Exception as exc:  # noqa: BLE001 - retried later, never fatal
            if self._published is None or self._published[0] != "failed":
                LOG.warning("cannot patch node condition %s: %s", self.type,
                            exc)
            self._published = ("failed", "")
            return False
        self._published = wanted
        LOG.debug("node condition %s patched: %s", self.type, self.status)
        return True


def from_conf(conf: cfg.ConfigOpts, *, master_pid: int | None = None
              ) -> NodeConditionPublisher | None:
    """The publisher for this daemon's configuration; None when off
    (``master_pid``: the daemon's, named in its client's User-Agent)."""
    from kuryr_supervisor.kubernetes import client as k8s  # keeps the client out of other imports
    from kuryr_supervisor.kubernetes import nodes
    kind = conf.health.node_condition_type
    if not kind or not k8s.is_configured(conf):
        return None
    client = k8s.K8sClient.from_conf(conf, master_pid=master_pid)
    return NodeConditionPublisher(
        kind, nodes.condition_setter(client.nodes, client.node),
        grace=conf.health.node_condition_grace)
