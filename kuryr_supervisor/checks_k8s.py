"""Readiness checks about the Kubernetes API (the ``k8s-api`` check).

An unreachable API makes the daemon NOT READY, never NOT ALIVE: restarting
the daemon cannot fix the API, and killing every node's CNI daemon during
an API outage would only add to it. The check is run by the HealthManager's
timer, off the probe path; it reuses its last answer for ``interval``
seconds so a thousand nodes do not poll ``/readyz`` at the check rate.

Interface: ``name``, ``kind`` ('readiness') and ``__call__() -> (ok,
message)``; the health module adapts it to its own check protocol.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

from oslo_config import cfg

LOG = logging.getLogger(__name__)

Probe = Callable[[], "tuple[bool, str]"]


class K8sApiCheck:
    """``/readyz`` (falling back to ``/healthz``) within a short timeout."""

    name = "k8s-api"
    kind = "readiness"

    def __init__(self, probe: Probe, *, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``probe`` is e.g. ``functools.partial(k8s_client.probe, timeout)``
        and must itself be bounded in time."""
        self._probe = probe
        self.interval = interval
        self._clock = clock
        self._last: tuple[bool, str] | None = None
        self._at = 0.0

    def __call__(self) -> tuple[bool, str]:
        now = self._clock()
        if self._last is not None and now - self._at < self.interval:
            return self._last
        try:
            result = self._probe()
        except Exception as exc:  # noqa: BLE001 - a check reports, never raises
            result = (False, f"probe failed: {exc}")
        if self._last is None or result[0] != self._last[0]:
            log = LOG.info if result[0] else LOG.warning
            log("Kubernetes API %s: %s",
                "reachable" if result[0] else "unreachable", result[1])
        self._last, self._at = result, now
        return result


def from_conf(conf: cfg.ConfigOpts) -> K8sApiCheck | None:
    """The check for this daemon's configuration; None when standalone."""
    from kuryr_supervisor import k8s  # keeps the client out of other imports
    if not k8s.is_configured(conf):
        return None
    client = k8s.K8sClient.from_conf(conf)
    return K8sApiCheck(
        functools.partial(client.probe, conf.kubernetes.api_check_timeout),
        interval=conf.kubernetes.api_check_interval)
