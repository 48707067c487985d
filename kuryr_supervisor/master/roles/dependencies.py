"""Readiness on the controller's dependencies: Kubernetes watchable,
Keystone authenticating, Neutron answering with port quota left, and,
where the services handler runs, Octavia answering.

Here, where the roles are assembled, because they hold the OpenStack
adapter: :mod:`kuryr_supervisor.health` never imports the controller. The
controller role's HealthManager builds them all (:func:`dependency_checks`,
its ``check_factory``); the CNI role's builds Keystone's and Neutron's with
``[controller] openstack_checks`` (:func:`openstack_checks`).

An outage of any of them makes the daemon NOT READY, never NOT ALIVE:
restarting the controller cannot bring Keystone back. Each is an I/O check
(run on the HealthManager's timer, never on a probe request) that reuses its
last answer for ``interval`` seconds, so probes cost no request at all and
the checks cost one request per interval. Keystone is asked only when the
cached token is missing or expires within the renewal margin (keystoneauth's
cache, the margin capped by :mod:`~kuryr_supervisor.controller.openstack.login`):
the check renews the token before it expires; after a refused login it
reports the backoff (when the next login is tried) instead of trying. A
login that fails in any call of the adapter (the ``neutron`` check's
included) fails the ``keystone`` check's view at once (until it looks
again, at its next run rather than its next interval): readiness names
Keystone, first, never the ``neutron`` check's "no token yet" alone.

Each check names only its own service: the adapter runs Keystone's calls
and Neutron's on call paths of their own, so a hung Neutron leaves the
Keystone check green, and a Neutron check that cannot get a token says
that it could not ask, leaving the cause to the Keystone check. The
``neutron`` check also says whether the pod network and subnet exist
(``[controller] pod_network_id``, ``pod_subnet_id``): a deleted one is a
refusal no restart fixes, named. The ``octavia`` check (built only where
``[controller] handlers`` names ``services``) asks Octavia for one load
balancer on a call path of Octavia's own: a hung or stopped Octavia fails
it alone, and, like every dependency, never liveness.

Bounded: like every I/O check each runs on a thread of its own under its
``timeout`` (:mod:`kuryr_supervisor.health.runner`): past it the check
fails naming the dependency and the wait, and no second probe starts while
the first hangs, so a Keystone or Neutron that hangs never holds the
HealthManager's loop. The timeout, and the adapter's own whole-call
deadline within it, are
:mod:`~kuryr_supervisor.controller.openstack.timeouts`' (the request
timeout, at most a quarter of ``[supervisor] health_deadline``). An answer that is
not JSON is reported the same way: not ready, named, never a liveness
failure.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.state import SharedState

LOG = logging.getLogger(__name__)


class _Cached(Check):
    """An I/O readiness check that probes at most every ``interval``,
    each probe bounded by ``deadline`` (see the module docstring)."""

    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, interval: Callable[[], float],
                 deadline: Callable[[], float] | None = None) -> None:
        self._interval = interval
        self._deadline = deadline
        self._last: Result | None = None
        self._at = 0.0

    def timeout(self) -> float | None:
        return self._deadline() if self._deadline is not None else None

    def run(self, now: float) -> Result:
        if self._last is not None and now - self._at < self._interval() \
                and not self.stale():
            return self._last
        try:
            result = self.probe()
        except Exception as exc:  # noqa: BLE001 - a check reports, never raises
            result = Result.failed(f"{self.name} unreachable: {exc}")
        self._last, self._at = result, now
        return result

    def probe(self) -> Result:
        raise NotImplementedError

    def stale(self) -> bool:
        """Whether the last answer is known wrong before its interval."""
        return False


class K8sWatchCheck(_Cached):
    """``k8s-watch``: a watch on pods is answered (RBAC, watch cache)."""

    name = "k8s-watch"

    def __init__(self, probe_watch: Callable[[], tuple[bool, str]],
                 interval: Callable[[], float]) -> None:
        super().__init__(interval)
        self._probe_watch = probe_watch

    def probe(self) -> Result:
        ok, message = self._probe_watch()
        return Result(ok, message if ok else
                      f"Kubernetes API cannot be watched: {message}")


class KeystoneCheck(_Cached):
    """``keystone``: a valid token is held (obtained or renewed in time)."""

    name = "keystone"

    def __init__(self, cloud: Any, interval: Callable[[], float],
                 wall_clock: Callable[[], float] = time.time,
                 deadline: Callable[[], float] | None = None) -> None:
        super().__init__(interval, deadline)
        self.cloud = cloud
        self._wall = wall_clock
        self._failures = self._logins_failed()

    def _logins_failed(self) -> int:
        login = getattr(self.cloud, "login", None)
        return int(getattr(login, "failures", 0))

    def stale(self) -> bool:
        """A login failed since the last look (another call needed one)."""
        return self._logins_failed() != self._failures

    def meanwhile(self) -> Result | None:
        """From the moment another call's login failed, not from this
        check's next run: readiness names Keystone as soon as the
        ``neutron`` check says it could not ask."""
        if not self.stale():
            return None
        return Result.failed("Keystone does not authenticate: a login "
                             "failed since the last look (checking again)")

    def probe(self) -> Result:
        from kuryr_supervisor.controller.openstack import adapter as osa
        self._failures = self._logins_failed()
        try:
            token = self.cloud.token()
        except osa.OpenStackError as exc:
            return Result.failed(f"Keystone does not authenticate: {exc}")
        left = token.expires_at - self._wall()
        return Result.passed(f"token valid for {left:.0f}s", left)


class NeutronCheck(_Cached):
    """``neutron``: Neutron answers and the project can create a port."""

    name = "neutron"

    def __init__(self, cloud: Any, project_id: Callable[[], str],
                 interval: Callable[[], float],
                 deadline: Callable[[], float] | None = None, *,
                 network_id: str = "", subnet_id: str = "") -> None:
        super().__init__(interval, deadline)
        self.cloud = cloud
        self._project = project_id
        self.network_id, self.subnet_id = network_id, subnet_id

    def probe(self) -> Result:
        from kuryr_supervisor.controller.openstack import adapter as osa
        try:
            project = self._project() or self.cloud.token().project_id
            quota = self.cloud.port_quota(project)
            missing = self._missing()
        except osa.KeystoneUnavailable:
            # Keystone's own check names the cause (it looks again at
            # once); this one names only what it could not do.
            return Result.failed("Neutron not asked: no token yet")
        except osa.OpenStackError as exc:
            return Result.failed(f"Neutron does not answer: {exc}")
        if missing:
            return Result.failed(missing)
        left = quota.left
        if left is None:
            return Result.passed("port quota unlimited")
        if left <= 0:
            return Result.failed(f"port quota exhausted: {quota.used} of "
                                 f"{quota.limit} ports used", left)
        return Result.passed(f"{left} of {quota.limit} ports left", left)

    def _missing(self) -> str:
        """What of the pod network and subnet Neutron lacks ("": both
        there, or none configured)."""
        from kuryr_supervisor.controller.openstack import adapter as osa
        if self.network_id:
            try:
                network = self.cloud.network(self.network_id)
            except osa.NetworkMissing:
                return (f"Neutron: the pod network {self.network_id} does "
                        f"not exist (NetworkNotFound)")
            if self.subnet_id and self.subnet_id not in network.subnets:
                return (f"Neutron: the pod subnet {self.subnet_id} does not "
                        f"exist on the pod network {self.network_id}")
        elif self.subnet_id:
            try:
                self.cloud.subnet(self.subnet_id)
            except osa.SubnetMissing:
                return (f"Neutron: the pod subnet {self.subnet_id} does not "
                        f"exist (SubnetNotFound)")
        return ""


class OctaviaCheck(_Cached):
    """``octavia``: Octavia answers (the services handler's load
    balancers); only where that handler runs."""

    name = "octavia"

    def __init__(self, cloud: Any, interval: Callable[[], float],
                 deadline: Callable[[], float] | None = None) -> None:
        super().__init__(interval, deadline)
        self.cloud = cloud

    def probe(self) -> Result:
        from kuryr_supervisor.controller.openstack import adapter as osa
        try:
            self.cloud.octavia().reachable()
        except osa.KeystoneUnavailable:
            return Result.failed("Octavia not asked: no token yet")
        except osa.OpenStackError as exc:
            return Result.failed(f"Octavia does not answer: {exc}")
        return Result.passed("Octavia answers")


def openstack_checks(conf: cfg.ConfigOpts, *,
                     master_pid: int | None = None) -> list[Check]:
    """Keystone and Neutron checks (and Octavia's, where the services
    handler runs), sharing one adapter (one token; ``master_pid``: the
    daemon's, named in its User-Agent)."""
    from kuryr_supervisor.controller.openstack import adapter as osa
    from kuryr_supervisor.controller.openstack import timeouts
    # The adapter's own whole-call bound is shorter than the check's, so
    # a hung call fails inside the check with the adapter's words (naming
    # Keystone or Neutron), before the check's own wait runs out.
    cloud = osa.OpenStack.from_conf(
        conf, deadline=timeouts.check_call_deadline(conf),
        master_pid=master_pid)
    opts = conf.controller

    def interval() -> float:
        return float(opts.openstack_check_interval)

    def deadline() -> float:
        return timeouts.check_wait(conf)
    from kuryr_supervisor.conf import controller as controller_conf
    from kuryr_supervisor.conf import services as services_conf
    checks: list[Check] = [
        KeystoneCheck(cloud, interval, deadline=deadline),
        NeutronCheck(cloud, lambda: str(opts.project_id), interval,
                     deadline=deadline,
                     network_id=str(opts.pod_network_id or ""),
                     subnet_id=str(opts.pod_subnet_id or ""))]
    if controller_conf.needs(conf).handlers and \
            services_conf.HANDLER in opts.handlers:
        checks.append(OctaviaCheck(cloud, interval, deadline=deadline))
    return checks


def dependency_checks(state: SharedState, conf: cfg.ConfigOpts,
                      master_pid: int) -> list[Check]:
    """The HealthManager's ``check_factory`` in the controller role: built in
    the worker after the fork, so no client is shared with the master."""
    from kuryr_supervisor.kubernetes import client as k8s
    client = k8s.K8sClient.from_conf(conf, master_pid=master_pid)
    timeout = float(conf.kubernetes.api_check_timeout)
    watch = K8sWatchCheck(lambda: client.probe_watch(timeout),
                          lambda: float(conf.kubernetes.api_check_interval))
    return [watch, *openstack_checks(conf, master_pid=master_pid)]
