"""The probe WSGI app: /startup, /ready, /alive, /status and /metrics.

One small object dispatching with a werkzeug ``Map``; tests drive it with
``werkzeug.test.Client`` and no socket. Answers follow the Kubernetes
apiserver's ``/livez`` and ``/readyz``: ``?verbose`` lists every check
(``[+]name ok`` / ``[-]name failed: reason``), ``?exclude=name`` (repeatable)
skips one, and ``/ready/NAME`` or ``/alive/NAME`` answers for a single check.

Invariants: a request does no I/O (it reads the monitor's snapshot and shared
memory through :meth:`HealthMonitor.evaluate`); an unknown path is 404, a
wrong method 405, and no request ever gets a traceback.
"""
from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Iterable
from typing import Any

from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from kuryr_supervisor import version
from kuryr_supervisor.health.checks.base import Kind
from kuryr_supervisor.health.checks.components import component_state, deadline_of
from kuryr_supervisor.health.metrics import MetricsExporter, NetworkStatus
from kuryr_supervisor.health.monitor import CheckView, HealthMonitor, Report
from kuryr_supervisor.state import Component, SharedState
from kuryr_supervisor.state.cnistatus import Excuse

LOG = logging.getLogger(__name__)

_PROBE = {"alive": (Kind.LIVENESS, "livez"), "ready": (Kind.READINESS, "readyz")}
_NO_CACHE = {"Cache-Control": "no-store"}
#: ``cniStatus.excused`` in ``/status``: why a failing data-plane check
#: does not fail STATUS (:mod:`kuryr_supervisor.netcheck.node.statushold`).
EXCUSED = {Excuse.NONE: None, Excuse.HELD: "held",
           Excuse.CLUSTER: "cluster-wide"}


def iso(epoch: float | None) -> str | None:
    """ISO-8601 UTC with milliseconds and a ``Z``; None stays None."""
    if epoch is None:
        return None
    stamp = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text(body: str, status: int = 200) -> Response:
    return Response(body if body.endswith("\n") else body + "\n",
                    status=status, mimetype="text/plain", headers=_NO_CACHE)


def _line(view: CheckView, excluded: bool = False) -> str:
    if excluded:
        return f"[+]{view.name} excluded: ok"
    if view.ok:
        return f"[+]{view.name} ok"
    return f"[-]{view.name} failed: {view.message}"


class ProbeApp:
    """The HealthManager's HTTP endpoints as a WSGI callable."""

    def __init__(self, monitor: HealthMonitor, state: SharedState, *,
                 metrics: MetricsExporter | None = None,
                 network: NetworkStatus | None = None) -> None:
        self.monitor = monitor
        self.state = state
        self.metrics = metrics or MetricsExporter(state, monitor, network)
        self.network = network
        self.url_map = Map([
            Rule("/startup", endpoint="startup", methods=["GET"]),
            Rule("/alive", endpoint="probe", defaults={"probe": "alive"},
                 methods=["GET"]),
            Rule("/ready", endpoint="probe", defaults={"probe": "ready"},
                 methods=["GET"]),
            Rule("/alive/<name>", endpoint="one", defaults={"probe": "alive"},
                 methods=["GET"]),
            Rule("/ready/<name>", endpoint="one", defaults={"probe": "ready"},
                 methods=["GET"]),
            Rule("/status", endpoint="status", methods=["GET"]),
            Rule("/metrics", endpoint="metrics", methods=["GET"]),
        ])

    def __call__(self, environ: dict[str, Any], start_response: Any
                 ) -> Iterable[bytes]:
        request = Request(environ)
        try:
            endpoint, values = self.url_map.bind_to_environ(environ).match()
            response = getattr(self, f"on_{endpoint}")(request, **values)
        except HTTPException as exc:
            response = _text(f"{exc.code} {exc.name}", exc.code or 500)
            if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
                response.headers["Allow"] = ", ".join(exc.valid_methods)
        except Exception:
            LOG.exception("probe request %s failed", request.path)
            response = _text("500 Internal Server Error", 500)
        return response(environ, start_response)

    # -- endpoints --------------------------------------------------------------
    def on_probe(self, request: Request, probe: str) -> Response:
        kind, word = _PROBE[probe]
        excluded = set(request.args.getlist("exclude"))
        views = [v for v in self.monitor.evaluate().checks if v.kind is kind]
        failed = [v for v in views if not v.ok and v.name not in excluded]
        if not failed and not _verbose(request):
            return _text("ok")
        shown = views if _verbose(request) else failed
        lines = [_line(v, v.name in excluded) for v in shown]
        lines.append(f"{word} check {'failed' if failed else 'passed'}")
        return _text("\n".join(lines), 503 if failed else 200)

    def on_one(self, request: Request, probe: str, name: str) -> Response:
        kind, _ = _PROBE[probe]
        check = self.monitor.find(name)
        if check is None or check.kind is not kind:
            return _text(f"404 Not Found: no {kind.value} check {name!r}", 404)
        view = self.monitor.evaluate().get(name)
        assert view is not None  # find() and evaluate() list the same checks
        if view.ok:
            body = f"{_line(view)}: {view.message}" if _verbose(request) \
                else "ok"
            return _text(body)
        return _text(_line(view), 503)

    def on_startup(self, request: Request) -> Response:
        if self.state.ever_ready():
            return _text("ok")
        result = self.monitor.evaluate().verdict
        if result.ready:       # ready now; the timer publishes it shortly
            return _text("ok")
        summary = result.summary
        return _text(f"[-]started failed: not ready yet ({summary})\n"
                     "startupz check failed", 503)

    def on_status(self, request: Request) -> Response:
        body = json.dumps(self.status(self.monitor.evaluate()), indent=2)
        return Response(body + "\n", mimetype="application/json",
                        headers=_NO_CACHE)

    def on_metrics(self, request: Request) -> Response:
        payload, content_type = self.metrics.render()
        return Response(payload, content_type=content_type,
                        headers=_NO_CACHE)

    # -- /status document -------------------------------------------------------
    def status(self, report: Report) -> dict[str, Any]:
        """The /status JSON document for one report."""
        inflight, capacity = self.state.server_load()
        failures = self.state.handler_failures()
        components = {}
        for comp in self.state.components():
            deadline = deadline_of(self.monitor.conf, comp.component)
            age = comp.heartbeat_age(report.now)
            started = (report.wall - (report.now - comp.started)
                       if comp.started else None)
            components[comp.component.label] = {
                "state": component_state(comp, deadline, report.now),
                "pid": comp.pid or None,
                "ready": comp.ready,
                "restarts": comp.restarts,
                "reason": comp.reason.name.lower(),
                "exitCode": comp.exit_code,
                "heartbeatAge": round(age, 3) if age != float("inf") else None,
                "deadline": deadline,
                "memory": comp.memory,
                "startedAt": iso(started),
                "since": iso(self.monitor.component_since(comp.component)),
                "updatedAt": iso(report.wall),
            }
            if comp.component in failures:     # a handler: its own budget
                components[comp.component.label]["failures"] = \
                    failures[comp.component]
        checks = {
            v.name: {"kind": v.kind.value, "state": "ok" if v.ok else "failed",
                     "message": v.message, "since": iso(v.since),
                     "updatedAt": iso(v.updated_at)}
            for v in report.checks}
        result = report.verdict
        return {
            "version": version.version(),
            "live": result.live, "ready": result.ready,
            "started": report.started, "draining": self.state.draining(),
            "summary": result.summary, "cause": result.cause.name.lower(),
            "time": iso(report.wall),
            "cniFailures": self.state.cni_failures(),
            # The worst handler's consecutive count (what the budget sees).
            "handlerFailures": max(failures.values(), default=0),
            "server": {"inflight": inflight, "capacity": capacity},
            "budgets": self.budgets(failures),
            "components": components, "checks": checks,
            "pools": self.state.pools.rows(),
            "network": self.network_status(),
            "policies": self.policies_status(),
        }

    def policies_status(self) -> dict[str, Any] | None:
        """Where the network_policy handler runs: its NetworkPolicies by
        state and Neutron as it last saw it (``kuryr-supervisor status``
        shows the count pending); None elsewhere."""
        if not any(c.handler == "network_policy" for c in self.state.active):
            return None
        figures = self.state.policies.read()
        return {"applied": int(figures["policies_applied"]),
                "pending": int(figures["policies_pending"]),
                "failed": int(figures["policies_failed"]),
                "neutron": self.state.policies.neutron_state()}

    def network_status(self) -> dict[str, Any] | None:
        """The CNI role: what STATUS answers (and, while it succeeds,
        a failing check it is excused for: ``excused``), the canary
        (``kuryr-supervisor status``: "network: 2/2 peers, gateway ok,
        ovn-controller connected") and the pods whose port is lost
        (``lostPorts``: never a failing check); None in the controller
        role."""
        if Component.SERVER not in self.state.active:
            return None
        code, cause, detail = self.state.cni_status.answer()
        return {"cniStatus": {"code": code, "cause": cause.name.lower(),
                              "message": detail, "excused": EXCUSED[
                                  self.state.cni_status.excuse()]},
                "canary": self.network() if self.network else None,
                "lostPorts": self.state.lost_ports.read().document()}

    def budgets(self, failures: dict[Any, int]) -> dict[str, Any]:
        """Each budget's use and limit, as the running daemon reads them
        (after a SIGHUP, its limits, not the file's): ``kuryr-supervisor
        status`` shows them."""
        conf = self.monitor.conf
        sup = conf.supervisor
        out: dict[str, Any] = {"restarts": {
            "exhausted": self.state.restart_budget_exceeded(),
            "total": sum(c.restarts for c in self.state.components()),
            "max": sup.max_restarts, "window": sup.restart_window}}
        if failures:       # the controller role: each handler's budget
            out["handlerFailures"] = {
                "count": max(failures.values()),
                "limit": conf.controller.handler_failures_count}
        else:
            out["cniFailures"] = {"count": self.state.cni_failures(),
                                  "limit": conf.cni_daemon.cni_failures_count}
        return out


def _verbose(request: Request) -> bool:
    value = request.args.get("verbose")
    return value is not None and value.lower() not in ("0", "false", "no")
