"""Stopping a real daemon from its terminal: Ctrl-C (SIGINT to the whole
foreground process group, as a terminal sends it) is a graceful stop as
SIGTERM is -- exit 0, the IPAM store checkpointed and closed (no
``ipam.sqlite-wal`` or ``-shm`` left) -- and a second Ctrl-C stops at once
(exit 1) even while the drain is held up."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon, wait_until
from tests.functional.cni_harness import HOST_PATH, install_shim

pytestmark = pytest.mark.privileged


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A ready daemon in a process group of its own (its terminal's job)."""
    d = Daemon(tmp_path)
    log = open(d.log_path, "ab")
    d.proc = subprocess.Popen(d.command(), stdout=log, stderr=subprocess.STDOUT,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"),
                              start_new_session=True)
    log.close()
    try:
        d.wait_ready()
        yield d
    finally:
        d.close()


def store_files(d: Daemon) -> set[str]:
    state = Path(d.options["ipam"]["state_dir"])
    return {p.name for p in state.iterdir() if p.name.startswith("ipam.")}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_stops_gracefully(daemon: Daemon, sig: int) -> None:
    # Open while running (the Server's environment check opens it; a
    # first look that met another process's checkpoint retries in 5 s).
    wait_until(lambda: "ipam.sqlite-wal" in store_files(daemon), 15)
    if sig == signal.SIGINT:
        os.killpg(daemon.pid, sig)      # a terminal's Ctrl-C: every process
    else:
        os.kill(daemon.pid, sig)        # systemd (KillMode=mixed), kubelet
    assert daemon.wait_exit(30) == 0, daemon.log()
    assert store_files(daemon) == {"ipam.sqlite"}, daemon.log()
    assert "draining" in daemon.log()
    if sig == signal.SIGINT:
        assert "SIGINT: stopping gracefully" in daemon.log()


#: Another user of the store: reads it, says so, and keeps its connection.
HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("SELECT COUNT(*) FROM allocations").fetchone()
print("open", flush=True)
sys.stdin.read()
"""


def test_a_store_user_cut_off_after_the_server_leaves_no_wal(
        daemon: Daemon) -> None:
    """A process still using the store when the Server closes it, ended
    without closing it (as the HealthManager may be, cut off mid-sample
    during its drain): the Server's close was not the last one, so
    ``-wal`` stays until the master, the last process out, settles the
    file. The HealthManager is held stopped, then killed, so no sample of
    its own closes the store last in the master's place."""
    db = Path(daemon.options["ipam"]["state_dir"]) / "ipam.sqlite"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    health = daemon.worker_pids()["health"]
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        os.kill(health, signal.SIGSTOP)
        os.kill(daemon.pid, signal.SIGTERM)
        wait_until(lambda: "server worker stopped" in daemon.log(), 30)
        assert "ipam.sqlite-wal" in store_files(daemon)  # not the last close
        holder.kill()                   # gone without closing
        holder.wait()
        os.kill(health, signal.SIGKILL)
    finally:
        holder.kill()
        holder.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(health, signal.SIGCONT)
    assert daemon.wait_exit(30) == 0, daemon.log()
    assert store_files(daemon) == {"ipam.sqlite"}, daemon.log()


def test_a_second_ctrl_c_stops_at_once(daemon: Daemon, tmp_path: Path
                                       ) -> None:
    """A DEL is in flight, waiting for its container's lock, which the test
    holds: the drain cannot finish before graceful_shutdown_timeout (25 s).
    The first Ctrl-C starts the drain, the second ends the daemon at once."""
    cid = f"stop{os.getpid():x}{time.monotonic_ns():x}"
    locks = Path(daemon.options["ipam"]["state_dir"]) / "locks"
    held = open(locks / f"{cid}.lock", "a+")
    fcntl.flock(held, fcntl.LOCK_EX)
    shim = install_shim(str(tmp_path))
    env = {"PATH": HOST_PATH, "CNI_COMMAND": "DEL", "CNI_CONTAINERID": cid,
           "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
    netconf = {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
               "daemon_socket": f"unix://{daemon.socket_path}", "timeout": 60}
    client = subprocess.Popen([shim], stdin=subprocess.PIPE, env=env,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert client.stdin is not None
        client.stdin.write(json.dumps(netconf))
        client.stdin.close()
        wait_until(lambda: daemon.status()["server"]["inflight"] == 1, 10)
        os.killpg(daemon.pid, signal.SIGINT)
        time.sleep(1.5)
        assert daemon.proc is not None and daemon.proc.poll() is None, \
            "the first Ctrl-C must drain, not exit"
        started = time.monotonic()
        os.killpg(daemon.pid, signal.SIGINT)
        assert daemon.wait_exit(10) == 1, daemon.log()
        assert time.monotonic() - started < 5
        assert "second SIGINT" in daemon.log()
    finally:
        held.close()
        client.kill()
        client.wait()
