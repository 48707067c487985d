"""Readiness about the Kubernetes API (the ``k8s-api`` check), one of the
CNI role's extras (:func:`kuryr_supervisor.master.roles.cni.node_checks`).

An unreachable API makes the daemon NOT READY, never NOT ALIVE: restarting
the daemon cannot fix the API, and killing every node's CNI daemon during an
API outage would only add to it. The check runs on the HealthManager's timer
(an I/O check, off the probe path) and reuses its last answer for
``interval`` seconds so a thousand nodes do not poll ``/readyz`` at the check
rate.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort

LOG = logging.getLogger(__name__)

Probe = Callable[[], "tuple[bool, str]"]


class K8sApiCheck(Check):
    """``/readyz`` (falling back to ``/healthz``) within a short timeout."""

    name = "k8s-api"
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, probe: Probe, *, interval: float = 10.0,
                 timeout: float | None = None) -> None:
        """``probe`` is e.g. ``functools.partial(k8s_client.probe, timeout)``
        and should itself be bounded in time; ``timeout`` is the run's
        deadline (the health monitor reports a longer run as failing)."""
        self._probe = probe
        self.interval = interval
        self._timeout = timeout
        self._last: Result | None = None
        self._at = 0.0

    def timeout(self) -> float | None:
        return self._timeout

    def run(self, now: float) -> Result:
        if self._last is not None and now - self._at < self.interval:
            return self._last
        try:
            ok, message = self._probe()
        except Exception as exc:  # noqa: BLE001 - a check reports, never raises
            ok, message = False, f"probe failed: {exc}"
        result = Result(ok, message if ok else f"Kubernetes API unreachable: {message}")
        self._last, self._at = result, now
        return result


def from_conf(conf: cfg.ConfigOpts, *,
              master_pid: int | None = None) -> K8sApiCheck | None:
    """The check for this daemon's configuration; None when standalone
    (``master_pid``: the daemon's, named in the client's User-Agent)."""
    from kuryr_supervisor.kubernetes import client as k8s  # keeps the client out of other imports
    if not k8s.is_configured(conf):
        return None
    client = k8s.K8sClient.from_conf(conf, master_pid=master_pid)
    return K8sApiCheck(
        functools.partial(client.probe, conf.kubernetes.api_check_timeout),
        interval=conf.kubernetes.api_check_interval,
        timeout=float(conf.kubernetes.api_check_timeout))

