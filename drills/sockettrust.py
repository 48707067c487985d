"""Socket trust: the CNI socket cannot be swapped, and a lost one comes back.

Three parts, against real daemons:

1. refused at start: a socket directory (or an ancestor) owned by uid 65534
   or writable by others makes the daemon exit 78 with one line naming it,
   before any worker runs (someone who can write there could replace the
   socket and answer the root shim's requests);
2. deleted: the socket file is removed under a running daemon, again and
   again; the master (which owns the socket) notices and binds it again
   and hands it to the running Server, and an ADD through the shim works
   again without a Server restart (figure: seconds from delete to a
   working socket);
3. replaced: a regular file is put in its place; ``/ready`` fails naming
   ``cni-environment`` and the socket path until the file is removed, then
   the socket is back and ``/ready`` is 200 again.

Invariants: nothing restarts a worker, the daemon exits 0 on SIGTERM.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from drills.common import Report, Workspace, eventually, percentile, stop, wait_ready
from tests.fixtures.daemon import Daemon


def connectable(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def refused_at_start(ws: Workspace, report: Report) -> None:
    for case in ("foreign", "writable"):
        daemon = ws.daemon()
        run_dir = daemon.socket_path.parent
        run_dir.mkdir()
        if case == "foreign":
            os.chown(run_dir, 65534, 65534)
        else:
            run_dir.chmod(0o777)
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "kuryr_supervisor.daemon",
                               "--config-file", str(daemon.config)],
                              capture_output=True, text=True, timeout=30)
        lines = done.stderr.strip().splitlines()
        report.check(done.returncode == 78 and len(lines) == 1
                     and str(run_dir) in lines[0],
                     f"{case} socket directory: exit {done.returncode}, "
                     f"{done.stderr[-300:]!r}")
        report.figures[f"refused ({case} dir) s"] = round(
            time.monotonic() - start, 2)


def run(short: bool = False, seed: int = 0) -> Report:
    del seed
    rounds = 3 if short else 30
    report = Report("sockettrust")
    with Workspace("sockettrust") as ws:
        refused_at_start(ws, report)
        daemon: Daemon = ws.start(ws.daemon())
        if not report.check(wait_ready(daemon), "daemon never became ready"):
            return report
        path = str(daemon.socket_path)
        netns = ws.netns()
        restarts = sum(c["restarts"] for c in daemon.status()["components"].values())
        back: list[float] = []
        for i in range(rounds):
            os.unlink(path)
            start = time.monotonic()
            if not report.check(eventually(lambda: connectable(path), 10),
                                f"round {i}: socket not bound again"):
                break
            back.append(time.monotonic() - start)
        added = ws.shim("ADD", ws.netconf(daemon), container_id="ksvxtrust",
                        netns=netns)
        report.check(added.status == 0, f"ADD after rebinding: {added.stdout!r}")
        ws.shim("DEL", ws.netconf(daemon), container_id="ksvxtrust", netns=netns)

        os.unlink(path)
        with open(path, "w") as f:
            f.write("not a socket\n")
        start = time.monotonic()
        failed = eventually(lambda: daemon.probe("/ready") == 503, 10)
        noticed = time.monotonic() - start
        code, body = daemon.get("/ready?verbose")
        report.check(failed and "[-]cni-environment" in body and path in body,
                     f"/ready with the socket replaced: {code} {body!r}")
        report.check(daemon.probe("/alive") == 200,
                     "/alive failed while the socket was replaced")
        os.unlink(path)
        start = time.monotonic()
        report.check(eventually(lambda: daemon.probe("/ready") == 200
                           and connectable(path), 10),
                     "/ready did not recover once the file was removed")
        recovered = time.monotonic() - start
        after = sum(c["restarts"] for c in daemon.status()["components"].values())
        report.check(after == restarts, f"workers restarted: {restarts} -> {after}")
        exit_status = stop(daemon)
        report.check(exit_status == 0, f"daemon exit status {exit_status}")
        report.figures.update({
            "deletions": rounds,
            "delete -> bound again s p50/max": "/".join(
                f"{percentile(back, p):.2f}" for p in (50, 100)),
            "replaced -> /ready 503 s": round(noticed, 2),
            "file removed -> /ready 200 s": round(recovered, 2),
        })
    return report
