"""``kuryr-supervisor status``: how the running daemon is, in a few lines.

It reads ``/status`` from the probe listener the configuration names
(``[cni_health_server] host:port``) and prints, in the spirit of ``cilium
status`` and ``systemctl status``: the overall state, each worker (pid,
restarts, heartbeat age, memory), the budgets, the failing checks with their
causes, the version, and the installed shim. ``--json`` prints ``/status``
as served.

Exit status, for scripts and ``kubectl exec``: 0 ready, 1 live but not
ready, 2 not live or unreachable (as the probes would judge it).

Whatever answers on that port is trusted for nothing (any local user may
have bound it while the daemon was down): the whole exchange is bounded in
time (:data:`TIMEOUT`, however slowly the bytes drip) and size
(:data:`MAX_BYTES`); an answer that is not a kuryr-supervisor ``/status``
document (its shape checked, :func:`validate`) is said to be so and exits
2, never a "ready"; every string printed has its control characters
replaced, so an answer cannot drive the terminal.
"""
from __future__ import annotations

import argparse
import http.client
import json
import re
import sys
import threading
from typing import Any

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.cli import configuration, shim, usage
from kuryr_supervisor.master import roles

READY, NOT_READY, NOT_LIVE = 0, 1, 2
#: The whole exchange, connect to last byte.
TIMEOUT = 5.0
MAX_BYTES = 4 * 1024 * 1024
#: Pods whose port is lost listed by name (``--json`` has the daemon's 64).
LOST_SHOWN = 10
_WILDCARD = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}
#: C0 and C1 controls and DEL (ESC sequences, carriage returns, bells).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class NotOurs(ValueError):
    """The answer is not a kuryr-supervisor /status document."""


def clean(value: Any) -> str:
    """``value`` as text with every control character shown as ``?``."""
    return _CONTROL.sub("?", str(value))


def _exchange(host: str, port: int, timeout: float) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(_WILDCARD.get(host, host), port,
                                      timeout=timeout)
    try:
        conn.request("GET", "/status")
        resp = conn.getresponse()
        body = resp.read(MAX_BYTES + 1)
    except http.client.HTTPException as exc:
        raise OSError(f"bad answer: {exc}") from exc
    finally:
        conn.close()
    return resp.status, body


def fetch(host: str, port: int, timeout: float = TIMEOUT) -> dict[str, Any]:
    """The /status document (raises OSError, or ValueError / NotOurs).

    The exchange runs in a thread joined for ``timeout`` in total: a
    socket timeout alone bounds each read, not an answer dripped a byte at
    a time."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["answer"] = _exchange(host, port, timeout)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["error"] = exc

    worker = threading.Thread(target=work, name="status-fetch", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise OSError(f"no complete answer within {timeout:g}s")
    if "error" in box:
        raise box["error"]
    status, body = box["answer"]
    if len(body) > MAX_BYTES:
        raise NotOurs(f"an answer larger than {MAX_BYTES // 1048576} MiB")
    if status != 200:
        raise NotOurs(f"HTTP {status}")
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise NotOurs("an answer that is not JSON") from exc
    return validate(doc)


#: What every /status document carries, and its type.
_SHAPE: dict[str, type | tuple[type, ...]] = {
    "version": str, "live": bool, "ready": bool, "summary": str,
    "cause": str, "components": dict, "checks": dict, "budgets": dict,
    "server": dict}


def validate(doc: Any) -> dict[str, Any]:
    """``doc`` when it has the shape of a kuryr-supervisor /status
    document (raises :class:`NotOurs` naming what is wrong)."""
    if not isinstance(doc, dict):
        raise NotOurs("a JSON document that is not an object")
    for key, kind in _SHAPE.items():
        if not isinstance(doc.get(key), kind):
            raise NotOurs(f"a JSON document without a valid {key!r}")
    for group in ("components", "checks"):
        for name, item in doc[group].items():
            if not isinstance(item, dict) or \
                    not isinstance(item.get("state"), str):
                raise NotOurs(f"a JSON document whose {group} "
                              f"{clean(name)!r} has no state")
    return doc


def exit_status(doc: dict[str, Any]) -> int:
    if not doc.get("live"):
        return NOT_LIVE
    return READY if doc.get("ready") else NOT_READY


def _mib(value: Any) -> str:
    return f"{value / 1048576:.1f} MiB" if value else "-"


def _age(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _state_word(doc: dict[str, Any]) -> str:
    if not doc.get("live"):
        return "NOT LIVE"
    if doc.get("draining"):
        return "draining"
    return "ready" if doc.get("ready") else "live, NOT READY"


def _budgets(doc: dict[str, Any]) -> list[str]:
    budgets = doc.get("budgets") or {}
    lines = []
    restarts = budgets.get("restarts")
    if restarts:
        state = "EXHAUSTED" if restarts.get("exhausted") else "ok"
        lines.append(f"  restarts       {state}: {restarts.get('total')} in "
                     f"total, at most {restarts.get('max')} within "
                     f"{restarts.get('window', 0):g}s")
    for key, label in (("cniFailures", "CNI failures"),
                       ("handlerFailures", "handler failures")):
        item = budgets.get(key)
        if item:
            count, limit = item.get("count", 0), item.get("limit", 0)
            state = "EXHAUSTED" if limit and count >= limit else "ok"
            lines.append(f"  {label:<14} {state}: {count} consecutive "
                         f"(limit {limit})")
    return lines


def network_line(doc: dict[str, Any]) -> str | None:
    """The data plane in one line ("2/2 peers, gateway ok, ovn-controller
    connected"); None when the document says nothing of it."""
    network = doc.get("network")
    if not isinstance(network, dict):
        return None
    parts = []
    canary = network.get("canary")
    if isinstance(canary, dict):
        if not canary.get("up"):
            parts.append(f"canary {canary.get('state')}")
        else:
            peers = canary.get("peers") or []
            reached = sum(1 for p in peers if p.get("reached"))
            parts.append(f"{reached}/{len(peers)} peers" if peers
                         else "no peers to probe")
            gateway = canary.get("gateway")
            if isinstance(gateway, dict):
                parts.append("gateway ok" if gateway.get("reached")
                             else "gateway UNREACHABLE")
            service = canary.get("service")
            if isinstance(service, dict):
                parts.append("service VIP ok" if service.get("reached")
                             else "service VIP UNREACHABLE")
    controller = (doc.get("checks") or {}).get("ovn-controller")
    if isinstance(controller, dict) and "not an OVN chassis" not in str(
            controller.get("message")):
        parts.append("ovn-controller connected"
                     if controller.get("state") == "ok"
                     else "ovn-controller NOT CONNECTED")
    lost = _lost_count(network)
    if lost:
        parts.append(f"{lost} pod port{'s' if lost > 1 else ''} LOST")
    status = network.get("cniStatus") or {}
    if status.get("code"):
        parts.append(f"CNI STATUS {status['code']}")
    elif status.get("excused") == "cluster-wide":
        parts.append("CNI STATUS ok (cluster-wide fault)")
    elif status.get("excused") == "held":
        parts.append("CNI STATUS held")
    return ", ".join(parts) if parts else None


def _lost_count(network: dict[str, Any]) -> int:
    lost = network.get("lostPorts")
    count = lost.get("count") if isinstance(lost, dict) else 0
    return count if isinstance(count, int) and not isinstance(count, bool) \
        and count > 0 else 0


def lost_lines(doc: dict[str, Any], most: int = LOST_SHOWN) -> list[str]:
    """The pods whose port is lost, ``most`` of them (none: no lines):
    each is one pod's problem (delete it), not the node's."""
    network = doc.get("network")
    if not isinstance(network, dict) or not _lost_count(network):
        return []
    count = _lost_count(network)
    lines = [f"Lost ports: {count} (the pod has no network; delete it)"]
    pods = network["lostPorts"].get("pods")
    shown = [p for p in (pods if isinstance(pods, list) else [])
             if isinstance(p, dict)][:most]
    for pod in shown:
        lines.append(f"  {pod.get('namespace')}/{pod.get('name')} port "
                     f"{pod.get('portId')}: {pod.get('why')}")
    if count > len(shown):
        lines.append(f"  ... and {count - len(shown)} more")
    return lines


def render(doc: dict[str, Any], installed: shim.ShimInfo | None = None,
           packaged: str | None = None) -> str:
    """The human summary of one /status document."""
    lines = [f"kuryr-supervisor {doc.get('version', '?')}: {_state_word(doc)}",
             f"  Summary:  {doc.get('summary', '')}"]
    if doc.get("cause") not in (None, "none"):
        lines.append(f"  Cause:    {doc['cause']}")
    server = doc.get("server") or {}
    if server.get("capacity"):
        lines.append(f"  Requests: {server.get('inflight', 0)}/"
                     f"{server['capacity']} in flight")
    network = network_line(doc)
    if network:
        lines.append(f"  Network:  {network}")
    policies = doc.get("policies")
    if isinstance(policies, dict):
        lines.append(f"  Policies: {policies.get('pending', 0)} pending, "
                     f"{policies.get('failed', 0)} failed, "
                     f"{policies.get('applied', 0)} applied (Neutron "
                     f"{policies.get('neutron', '?')})")
    lines.append("Workers:")
    for name, comp in (doc.get("components") or {}).items():
        pid = comp.get("pid") or "-"
        extra = ""
        if comp.get("restarts"):
            extra = f" (last: {comp.get('reason')}, status {comp.get('exitCode')})"
        lines.append(f"  {name:<14} {comp.get('state', '?'):<9} pid {pid!s:<8}"
                     f" restarts {comp.get('restarts', 0):<3} heartbeat "
                     f"{_age(comp.get('heartbeatAge')):<7} memory "
                     f"{_mib(comp.get('memory'))}{extra}")
    lines.extend(lost_lines(doc))
    budget_lines = _budgets(doc)
    if budget_lines:
        lines.append("Budgets:")
        lines.extend(budget_lines)
    failing = {n: c for n, c in (doc.get("checks") or {}).items()
               if c.get("state") != "ok"}
    if failing:
        lines.append("Failing checks:")
        for name, check in failing.items():
            lines.append(f"  [-] {name} ({check.get('kind')}, since "
                         f"{check.get('since')}): {check.get('message')}")
    else:
        lines.append(f"Checks:   all {len(doc.get('checks') or {})} passing")
    if installed is not None:
        lines.append(f"Shim:     {installed.describe()}")
    if packaged == shim.PYTHON:
        lines.append(f"  package carries the Python shim only ({shim.HINT})")
    elif packaged is not None:
        lines.append(f"  package carries the {packaged} shim")
    # Every value came from the answer: no control character reaches the
    # terminal.
    return "\n".join(clean(line) for line in lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{usage.PROG} status", allow_abbrev=False,
        description="How the running daemon is: reads /status from the "
                    "probe listener the configuration names ([cni_health_"
                    "server] host:port). Exit status: 0 ready, 1 live but "
                    "not ready, 2 not live or unreachable.",
        epilog=usage.subcommand_epilog())
    p.add_argument("--json", action="store_true",
                   help="print /status as the daemon serves it")
    return p


def main(args: list[str]) -> int:
    own, rest = parser().parse_known_args(args)
    try:
        conf = configuration.load_conf(rest)
    except conf_mod.ConfigError as exc:
        print(f"kuryr-supervisor: configuration error: {exc}", file=sys.stderr)
        return NOT_LIVE
    return show(conf, as_json=own.json)


def show(conf: cfg.ConfigOpts, *, as_json: bool = False) -> int:
    opts = conf.cni_health_server
    where = f"{opts.host}:{opts.port}"
    try:
        doc = fetch(opts.host, opts.port)
        text = json.dumps(doc, indent=2) + "\n" if as_json else None
        if text is None:
            installs = roles.named(conf.role).installs_shim
            installed = shim.installed(conf) if installs else None
            text = _render_checked(doc, installed, shim.packaged_kind())
    except NotOurs as exc:
        print(f"kuryr-supervisor: {where} is not a kuryr-supervisor probe "
              f"listener: it answered /status with {clean(exc)}",
              file=sys.stderr)
        return NOT_LIVE
    except (OSError, ValueError) as exc:
        print(f"kuryr-supervisor: not reachable at {where}/status: "
              f"{clean(exc)}", file=sys.stderr)
        return NOT_LIVE
    sys.stdout.write(text)      # JSON: ensure_ascii escapes the controls
    return exit_status(doc)


def _render_checked(doc: dict[str, Any], installed: shim.ShimInfo | None,
                    packaged: str | None) -> str:
    """:func:`render`, or :class:`NotOurs` when a field has a type no
    kuryr-supervisor sends (a number where text is due, ...)."""
    try:
        return render(doc, installed, packaged)
    except (TypeError, ValueError, AttributeError) as exc:
        raise NotOurs("a JSON document with fields of the wrong type") from exc
