"""Fuzz: property-based requests to the real daemon's CNI socket and to the
shim, checked against the CNI contract.

Per case: no crash, no traceback or HTML in an answer, every error a CNI
error object ``{cniVersion, code, msg}`` whose code is in ``errors.WIRE``.
After the run: ``/alive`` still 200, no CNI failure counted (garbage must
never make the daemon unhealthy), and the state directory logically
identical to before (no fuzzed request here can be valid enough to change
it: no strategy names a real network namespace).

Why failures are collected rather than raised: a drill should say how many
cases broke and how, not stop at the first; the unit tests
(``tests/unit/test_fuzz_protocol.py``) raise and let hypothesis shrink.
"""
from __future__ import annotations

import collections
import http.client
import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from drills import strategies
from drills.common import (
    CNI_CODES,
    Report,
    Workspace,
    db_path,
    ip_json,
    percentile,
    stop,
    wait_ready,
)
from kuryr_supervisor.cni import protocol, shim
from kuryr_supervisor.errors import WIRE
from tests.fixtures.daemon import Daemon

#: Failures already reported, as (exception type, message fragment, bug).
KNOWN_BUGS: tuple[tuple[str, str, str], ...] = ()
HTTP_STATUSES = {w.http_status for w in WIRE.values()}


def post(socket_path: str, body: bytes, timeout: float = 30.0
         ) -> tuple[int, str, bytes]:
    """POST /cni over the Unix socket: (status, content type, body)."""
    conn = http.client.HTTPConnection("localhost", timeout=timeout)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(socket_path)
    conn.sock = sock
    try:
        conn.request("POST", "/cni", body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


def real_netns(path: str) -> bool:
    """True if ``path`` is a network namespace (such a case is skipped)."""
    try:
        return protocol.is_netns(path)
    except ValueError:          # NUL byte: not a path the kernel takes
        return False


def error_code(data: bytes) -> str:
    """The CNI code in an error answer, "?" when there is none."""
    try:
        obj = json.loads(data)
    except ValueError:
        return "?"
    return str(obj.get("code", "?")) if isinstance(obj, dict) else "?"


def answer_problem(status: int, ctype: str, data: bytes, command: Any) -> str | None:
    """Why one API answer breaks the contract, or None."""
    low = data.lower()
    if b"traceback" in low or b"<html" in low:
        return f"traceback or HTML: {data[:200]!r}"
    if status == 204:
        return None if not data else f"204 with a body {data[:100]!r}"
    if "application/json" not in ctype:
        return f"HTTP {status} with Content-Type {ctype!r}"
    try:
        obj = json.loads(data)
    except ValueError:
        return f"HTTP {status}: body not JSON {data[:100]!r}"
    if status == 200:
        return None if command == "VERSION" else f"{command!r} succeeded: {obj}"
    if status not in HTTP_STATUSES:
        return f"HTTP status {status} not in the WIRE table"
    if not isinstance(obj, dict) or not {"cniVersion", "code", "msg"} <= set(obj):
        return f"not a CNI error object: {obj}"
    return None if obj["code"] in CNI_CODES else f"code {obj['code']} not in WIRE"


def classify(report: Report, problem: str) -> None:
    for kind, fragment, bug in KNOWN_BUGS:
        if kind in problem and fragment in problem:
            if bug not in report.known:
                report.known.append(bug)
            return
    if len(report.failures) < 200:
        report.failures.append(problem)


def run_cases(strategy: st.SearchStrategy[Any], case: Callable[[Any], None],
              examples: int, seed_: int) -> None:
    """Run ``case`` on ``examples`` generated values (``case`` never raises)."""
    @seed(seed_)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), derandomize=False)
    @given(strategy)
    def each(value: Any) -> None:
        case(value)
    each()


def state_snapshot(daemon: Daemon) -> dict[str, str]:
    """The state directory, logically: every file but SQLite's runtime
    files, and the allocation store as an SQL dump."""
    root = str(daemon.options["ipam"]["state_dir"])
    out: dict[str, str] = {}
    for base, _, names in os.walk(root):
        for name in names:
            path = os.path.join(base, name)
            if name.endswith(("-wal", "-shm", ".sqlite")):
                continue
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read().hex()
    conn = sqlite3.connect(f"file:{db_path(daemon)}?mode=ro", uri=True)
    try:
        out["ipam.sqlite (dump)"] = "\n".join(conn.iterdump())
    finally:
        conn.close()
    return out


def run(short: bool = False, seed: int = 0) -> Report:
    report = Report("fuzz")
    api_n, shim_n = (300, 300) if short else (10_000, 5_000)
    with Workspace("fuzz") as ws:
        daemon = ws.start(ws.daemon())
        if not report.check(wait_ready(daemon), "daemon never became ready"):
            return report
        sock = str(daemon.socket_path)
        before = state_snapshot(daemon)
        statuses: collections.Counter[str] = collections.Counter()
        seconds: list[float] = []

        def api_case(body: bytes) -> None:
            try:
                decoded = json.loads(body)
                env = decoded.get("env") if isinstance(decoded, dict) else None
                command = env.get("CNI_COMMAND") if isinstance(env, dict) else None
                netns = env.get("CNI_NETNS") if isinstance(env, dict) else None
            except (ValueError, RecursionError):
                command = netns = None
            if isinstance(netns, str) and real_netns(netns):
                return                      # never plumb a real namespace
            start = time.monotonic()
            try:
                status, ctype, data = post(sock, body)
            except Exception as exc:  # noqa: BLE001 - a finding, not a crash
                classify(report, f"API: {exc!r} for {body[:120]!r}")
                return
            seconds.append(time.monotonic() - start)
            statuses[f"{status}/{error_code(data)}" if status >= 400
                     else str(status)] += 1
            problem = answer_problem(status, ctype, data, command)
            if problem:
                classify(report, f"API: {problem} for {body[:120]!r}")

        run_cases(strategies.request_bodies(), api_case, api_n, seed)
        shim_codes = fuzz_shim(report, sock, shim_n, seed)
        alive = daemon.probe("/alive")
        status = daemon.status()
        after = state_snapshot(daemon)
        ports = ip_json("link", "show", "master", str(daemon.options["binding"]["bridge"]))
        exit_status = stop(daemon)
        changed = sorted(k for k in before.keys() | after.keys()
                         if before.get(k) != after.get(k))
        report.check(alive == 200, f"/alive answered {alive} after the fuzz")
        report.check(status["cniFailures"] == 0,
                     f"{status['cniFailures']} CNI failures counted from garbage")
        report.check(not changed, f"state directory changed: {changed}")
        report.check(not ports, f"bridge ports appeared: {ports}")
        report.check(exit_status == 0, f"daemon exit status {exit_status}")
        report.figures.update({
            "API cases": f"{sum(statuses.values())} (HTTP/code {dict(statuses)})",
            "API seconds p50/p99/max": "/".join(
                f"{percentile(seconds, p):.3f}" for p in (50, 99, 100)),
            "shim cases": f"{sum(shim_codes.values())} ({dict(shim_codes)})",
            "/alive after": alive, "cni failures counted": status["cniFailures"],
            "state dir unchanged": not changed,
            "distinct failures": len(report.failures),
        })
    return report


def fuzz_shim(report: Report, sock: str, examples: int, seed_: int
              ) -> collections.Counter[str]:
    """The shim's own parsing, in-process, dialling our daemon or dead ends."""
    # Dead ends the shim does not wait out (ENOTDIR, ENETUNREACH): a missing
    # socket or a refusal is retried until the netconf's timeout, which
    # tests/functional/test_shim_restart.py covers.
    dead_unix = f"unix://{sock}/nope"
    dead_tcp = "224.0.0.1:1"
    codes: collections.Counter[str] = collections.Counter()

    def shim_case(value: tuple[dict[str, str], str]) -> None:
        environ, stdin = value
        if real_netns(environ.get("CNI_NETNS", "")):
            return
        try:
            status, out = shim.run(environ, stdin)
        except Exception as exc:  # noqa: BLE001 - a finding, not a crash
            classify(report, f"shim: {type(exc).__name__}: {exc} for "
                             f"env={environ!r} stdin={stdin[:120]!r}")
            return
        try:
            obj = json.loads(out) if out else None
        except ValueError:
            classify(report, f"shim: output not JSON {out[:200]!r}")
            return
        if status == 0:
            codes["ok"] += 1
            return
        ok = (status == 1 and isinstance(obj, dict) and obj.get("code") in CNI_CODES
              and {"cniVersion", "code", "msg"} <= set(obj))
        codes[f"code {obj.get('code') if isinstance(obj, dict) else '?'}"] += 1
        if not ok:
            classify(report, f"shim: exit {status} with {out[:200]!r}")

    run_cases(strategies.shim_inputs([f"unix://{sock}", dead_unix, dead_tcp]),
              shim_case, examples, seed_ + 1)
    return codes
