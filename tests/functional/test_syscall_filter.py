"""The systemd unit's ``SystemCallFilter`` covers every system call the
daemon makes: a real daemon, traced with strace through start-up, an ADD
and a DEL into a real namespace, /status and /metrics, SIGHUP and a SIGTERM
drain; every call seen must be in the unit's allow-list (systemd-analyze
expands its groups). There is no systemd as PID 1 here to run the unit
itself, so this is how the filter is checked."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.functional.cni_harness import Namespaces
from tests.functional.test_capabilities import add_and_del
from tests.unit.test_packaging import UNIT, unit

pytestmark = pytest.mark.privileged


def allowed_syscalls() -> set[str]:
    listing = subprocess.run(["systemd-analyze", "syscall-filter"],
                             capture_output=True, text=True, check=True,
                             timeout=60).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in listing.splitlines():
        if line.startswith("@"):
            current = line.split()[0]
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.split()[0])

    def expand(name: str) -> set[str]:
        if not name.startswith("@"):
            return {name}
        return set().union(*(expand(n) for n in groups[name]))
    entries = unit()["Service"]["SystemCallFilter"].split()
    assert not any(e.startswith("~") for e in entries), UNIT
    return set().union(*(expand(e) for e in entries))


class TracedDaemon(Daemon):
    def start(self) -> TracedDaemon:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.trace = self.workdir / "trace"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["strace", "-f", "-qq", "-o", str(self.trace), sys.executable,
                 "-m", "kuryr_supervisor.daemon", "--config-file",
                 str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    def master(self) -> int:
        with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
            return int(f.read().split()[0])


def test_every_call_is_in_the_units_filter(tmp_path: Path,
                                           namespaces: Namespaces) -> None:
    assert shutil.which("strace"), "strace is not installed"
    workdir = tmp_path / "d"
    workdir.mkdir()
    daemon = TracedDaemon(workdir).start()
    try:
        daemon.wait_ready(60)
        code, result, del_code = add_and_del(daemon, tmp_path,
                                             namespaces.create())
        assert (code, del_code) == (0, 0), result
        daemon.get("/status")
        daemon.get("/metrics")
        master = daemon.master()
        os.kill(master, signal.SIGHUP)
        time.sleep(1.0)
        os.kill(master, signal.SIGTERM)
        assert daemon.wait_exit(30) == 0
    finally:
        daemon.close()
    used = set()
    for line in daemon.trace.read_text(errors="replace").splitlines():
        match = re.match(r"\d+\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]", line)
        if match:
            used.add(match.group(1))
    used -= {"exited", "killed", "resumed", "restart_syscall"}
    # The daemon itself; strace's own exec of it is not the unit's business.
    assert len(used) > 40, sorted(used)
    assert used - allowed_syscalls() == set()
