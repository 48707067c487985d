"""``check-config`` and the daemon agree, case by case: for each
configuration below, check-config is run, then the real daemon is started
on the same file, and both must judge alike -- check-config exits 78 with
one line exactly when the daemon refuses to start with 78, and both lines
name the same option. A start that meets a port held by another process
exits 78 naming the holder; check-config, run beside the running daemon
whose port that is, leaves it to the start: it says ok."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon

pytestmark = pytest.mark.privileged

STARTS = 0          # the daemon became ready (check-config: ok)


@contextlib.contextmanager
def read_only_tmpfs(where: Path) -> Iterator[Path]:
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,mode=0700,size=1m",
                    "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def check_config(d: Daemon) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", "check-config",
         "--config-file", str(d.config)], capture_output=True, text=True,
        timeout=30, check=False)


def daemon_outcome(d: Daemon, timeout: float = 30) -> tuple[int, str]:
    """The daemon's exit status when it refuses, or STARTS once ready."""
    d.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert d.proc is not None
            code = d.proc.poll()
            if code is not None:
                return code, d.log()
            if d.probe("/ready") == 200:
                return STARTS, d.log()
            time.sleep(0.1)
        raise AssertionError(f"neither ready nor refused:\n{d.log()}")
    finally:
        d.close()


Setup = Callable[[Path, contextlib.ExitStack], dict[str, dict[str, Any]]]


def _ok(tmp: Path, stack: contextlib.ExitStack) -> dict[str, dict[str, Any]]:
    return {}


def _typo(tmp: Path, stack: contextlib.ExitStack) -> dict[str, dict[str, Any]]:
    return {"supervisor": {"max_restart": 2}}       # a warning, not a refusal


def _bad_value(tmp: Path, stack: contextlib.ExitStack
               ) -> dict[str, dict[str, Any]]:
    return {"supervisor": {"max_restarts": "five"}}


def _state_file(tmp: Path, stack: contextlib.ExitStack
                ) -> dict[str, dict[str, Any]]:
    (tmp / "file").write_text("not a directory\n")
    return {"ipam": {"state_dir": str(tmp / "file")}}


def _state_under_file(tmp: Path, stack: contextlib.ExitStack
                      ) -> dict[str, dict[str, Any]]:
    (tmp / "file").write_text("not a directory\n")
    return {"ipam": {"state_dir": str(tmp / "file" / "state")}}


def _state_in_proc(tmp: Path, stack: contextlib.ExitStack
                   ) -> dict[str, dict[str, Any]]:
    return {"ipam": {"state_dir": f"/proc/kuryr-supervisor-{tmp.name}/state"}}


def _state_read_only_parent(tmp: Path, stack: contextlib.ExitStack
                            ) -> dict[str, dict[str, Any]]:
    ro = stack.enter_context(read_only_tmpfs(tmp / "ro"))
    return {"ipam": {"state_dir": str(ro / "state")}}


def _state_read_only_itself(tmp: Path, stack: contextlib.ExitStack
                            ) -> dict[str, dict[str, Any]]:
    ro = stack.enter_context(read_only_tmpfs(tmp / "ro"))
    return {"ipam": {"state_dir": str(ro)}}


def _socket_too_long(tmp: Path, stack: contextlib.ExitStack
                     ) -> dict[str, dict[str, Any]]:
    deep = tmp / ("d" * 60)
    return {"cni_daemon": {"bind_address": f"unix://{deep}/{'s' * 40}.sock"}}


def _socket_read_only(tmp: Path, stack: contextlib.ExitStack
                      ) -> dict[str, dict[str, Any]]:
    ro = stack.enter_context(read_only_tmpfs(tmp / "ro"))
    return {"cni_daemon": {"bind_address": f"unix://{ro}/run/cni.sock"}}


def _probe_not_local(tmp: Path, stack: contextlib.ExitStack
                     ) -> dict[str, dict[str, Any]]:
    return {"cni_health_server": {"host": "192.0.2.1"}}    # TEST-NET-1


def _probe_port_taken(tmp: Path, stack: contextlib.ExitStack
                      ) -> dict[str, dict[str, Any]]:
    holder = stack.enter_context(socket.socket())
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return {"cni_health_server": {"port": holder.getsockname()[1]}}


# case: (setup, check-config's status, the daemon's, what both lines name:
# the option, or for the daemon's listener errors "cni listener")
CASES: dict[str, tuple[Setup, int, int, str]] = {
    "ok": (_ok, 0, STARTS, ""),
    "unknown-option": (_typo, 0, STARTS, ""),
    "bad-value": (_bad_value, 78, 78, "[supervisor] max_restarts"),
    "state-dir-is-a-file": (_state_file, 78, 78, "[ipam] state_dir"),
    "state-dir-cannot-be-created": (_state_under_file, 78, 78,
                                    "[ipam] state_dir"),
    "state-dir-in-proc": (_state_in_proc, 78, 78, "[ipam] state_dir"),
    "state-dir-parent-read-only": (_state_read_only_parent, 78, 78,
                                   "[ipam] state_dir"),
    "state-dir-read-only": (_state_read_only_itself, 78, 78,
                            "[ipam] state_dir"),
    "socket-path-too-long": (_socket_too_long, 78, 78,
                             "[cni_daemon] bind_address|cni listener"),
    "socket-dir-read-only": (_socket_read_only, 78, 78,
                             "[cni_daemon] bind_address|cni listener"),
    "probe-address-not-local": (_probe_not_local, 78, 78,
                                "[cni_health_server]"),
    "probe-port-held-by-another": (_probe_port_taken, 0, 78,
                                   "[cni_health_server]"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_check_config_and_the_daemon_agree(tmp_path: Path, case: str) -> None:
    setup, want_check, want_daemon, names = CASES[case]
    named, daemon_named = (names.split("|") + [names])[:2]
    (tmp_path / "d").mkdir()
    with contextlib.ExitStack() as stack:
        d = Daemon(tmp_path / "d", setup(tmp_path, stack))
        checked = check_config(d)
        status, log = daemon_outcome(d)
        verdict = (checked.returncode, status)
        assert verdict == (want_check, want_daemon), (
            f"check-config: {checked.returncode} {checked.stderr!r}; "
            f"daemon: {status}\n{log}")
        assert "Traceback" not in checked.stderr
        if want_check == 78:
            assert checked.stdout == "" and checked.stderr.count("\n") == 1
            assert named in checked.stderr
        if want_daemon in (77, 78):
            refusal = [line for line in log.splitlines()
                       if line.startswith("kuryr-supervisor: ")]
            assert len(refusal) == 1, log
            assert daemon_named in refusal[0], log
        if want_check == 0:
            assert checked.stdout == "ok\n", checked.stderr
