"""The runner: every benchmark in one run, one table, one JSON file.

Each benchmark's figure is measured in the same run as its reference and
quoted with the ratio, under a statement of the machine (cores, load average
before and after, Python), because on a shared 2-core host the load is part
of the result. A benchmark that fails is reported and the others still run;
whatever the run created is removed on the way out, Ctrl-C and SIGTERM
included.

Usage (as root)::

    python3 -m benchmarks [--json PATH] [--only NAME ...] [--quick]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks import (
    burst,
    cni_latency,
    controller,
    controller_pool,
    controller_real,
    controller_scale,
    controller_slow,
    cri,
    dataplane,
    fleet,
    health,
    memory,
    ovs_binding,
    ovsdb_clients,
    policy,
    probes,
    recovery,
    services,
    shim_cpu,
    startup,
    status,
)
from benchmarks.context import Context, Outcome
from benchmarks.harness import REPO, Workspace
from benchmarks.stats import format_machine, format_table, machine

LOG = logging.getLogger("benchmarks")
#: Run order: start-up first on a machine with no daemon of ours yet.
BENCHMARKS: dict[str, Callable[[Context], Outcome]] = {
    "startup": startup.run, "cni-latency": cni_latency.run, "burst": burst.run,
    "shim-cpu": shim_cpu.run, "probes": probes.run, "memory": memory.run,
    "recovery": recovery.run,
    "controller": controller.run, "controller-scale": controller_scale.run,
    "controller-pool": controller_pool.run,
    "controller-real": controller_real.run,
    "controller-slow": controller_slow.run, "fleet": fleet.run,
    "cri": cri.run, "dataplane": dataplane.run,
    "ovs-binding": ovs_binding.run, "ovsdb-clients": ovsdb_clients.run,
    "status": status.run, "health": health.run, "services": services.run,
    "policy": policy.run,
}


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=Path(".bench/results.json"),
                        help="where to write the results (default: %(default)s)")
    parser.add_argument("--only", action="append", choices=list(BENCHMARKS),
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--source", type=Path, default=REPO,
                        help="tree whose kuryr_supervisor/ is measured (default: this "
                             "checkout); e.g. an exported commit to compare with")
    parser.add_argument("--rev", help="measure this git revision of the checkout instead "
                                      "(its kuryr_supervisor/ exported with git archive)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sample sizes: checks the harness, figures meaningless")
    return parser.parse_args(argv)


def execute(names: list[str], ctx: Context) -> dict[str, Any]:
    """Run the named benchmarks in order; a failure is recorded, not fatal."""
    results: dict[str, Any] = {}
    for name in names:
        LOG.info("running %s", name)
        started = time.perf_counter()
        try:
            outcome = BENCHMARKS[name](ctx)
        except Exception as exc:
            LOG.error("%s failed: %s", name, exc)
            results[name] = {"error": "".join(traceback.format_exception(exc)),
                             "seconds": time.perf_counter() - started}
            continue
        results[name] = {"figures": outcome.figures, "raw": outcome.raw,
                         "notes": outcome.notes, "seconds": time.perf_counter() - started}
        LOG.info("%s done in %.1f s", name, results[name]["seconds"])
    return results


def report(info: dict[str, Any], results: dict[str, Any]) -> str:
    figures = [f for r in results.values() for f in r.get("figures", [])]
    code = info.get("code", {})
    lines = [format_machine(info),
             f"code: {code.get('source')} (commit {code.get('commit')}"
             f"{', with uncommitted edits' if code.get('edited') else ''})",
             "", format_table(figures), ""]
    for name, result in results.items():
        lines += [f"- {note}" for note in result.get("notes", [])]
        if "error" in result:
            lines.append(f"- {name} FAILED: {result['error'].strip().splitlines()[-1]}")
    met = [f.met for f in figures if f.met is not None]
    lines.append(f"\ngoals met: {sum(met)}/{len(met)}; ratio = value / reference; "
                 "'budget' references are the goal itself.")
    return "\n".join(lines)


def describe(source: Path) -> dict[str, Any]:
    """Which code is measured: the tree, its commit and whether it is edited."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True,
                              text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""
    return {"source": str(source), "commit": git("rev-parse", "--short", "HEAD") or None,
            "edited": bool(git("status", "--porcelain", "--", "kuryr_supervisor"))}


def export(rev: str, into: Path) -> dict[str, Any]:
    """``kuryr_supervisor/`` of ``rev`` under ``into``: measured without touching
    the checkout, so edits in progress there do not leak into the figures."""
    into.mkdir(parents=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev],
                            capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "kuryr_supervisor"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return {"source": f"{REPO} at {rev}", "commit": commit, "edited": False}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                        stream=sys.stderr)
    if os.geteuid() != 0:
        print("benchmarks need root (network namespaces, bridges)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    info = machine()
    names = [n for n in BENCHMARKS if not args.only or n in args.only]
    started = time.perf_counter()
    ws = Workspace(args.source.resolve())
    try:
        if args.rev:
            ws.source = ws.tmp / "source"
            info["code"] = export(args.rev, ws.source)
        else:
            info["code"] = describe(ws.source)
        results = execute(names, Context(ws, quick=args.quick))
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc or 'SIGINT'}); removing what the run created",
              file=sys.stderr)
        return 130
    finally:
        ws.close()
    info["loadavg_after"] = list(os.getloadavg())
    info["seconds"] = time.perf_counter() - started
    info["quick"] = args.quick
    print(report(info, results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": info, "benchmarks": {
        name: {**r, "figures": [f.as_dict() for f in r.get("figures", [])]}
        for name, r in results.items()}}
    args.json.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"results written to {args.json}")
    return 1 if any("error" in r for r in results.values()) else 0
