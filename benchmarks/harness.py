"""What every benchmark runs against: a workspace and real daemon processes.

A :class:`Workspace` owns everything a run creates — a temporary directory,
network namespaces, bridges, daemon processes and the host's
``net.ipv4.ip_forward`` (the reference ``bridge`` plugin with ``isGateway``
turns it on) — and ``close()`` removes or restores all of it, whatever
happened, Ctrl-C included. Names carry a random suffix so engineers sharing
a host never collide.

A :class:`BenchDaemon` is a standalone kuryr-supervisor (no Kubernetes API)
started exactly as an operator would (``python3 -m kuryr_supervisor.daemon
--config-file ...``) with its own config, probe port, CNI socket, state
directory, bridge and subnet; production defaults unless a benchmark
overrides an option, and the benchmark says so. The code run is the
checkout (or the ``--source`` tree) put first on ``PYTHONPATH``.
"""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
Options = dict[str, dict[str, Any]]


def unique(prefix: str, length: int = 15) -> str:
    """``prefix`` plus random hex up to ``length`` (an interface name's limit)."""
    return prefix + secrets.token_hex(8)[:length - len(prefix)]


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(interval)
    return value


def probe_once(port: int, path: str, timeout: float = 1.0) -> tuple[int, float, bytes]:
    """One kubelet-style probe: a new connection, ``Connection: close``.

    Returns (status, seconds, body); status 0 when nothing answered in time
    (the kubelet's default probe timeout is 1 s). Like the kubelet's Go
    client, the probe is complete once ``Content-Length`` bytes of body are
    in, and the client closes first: it does not wait for the server's FIN
    (werkzeug lingers up to 10 ms for a request body before closing). A raw
    socket keeps the client's own cost far below what is measured.
    """
    request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               "User-Agent: kube-probe/1.30\r\nConnection: close\r\n\r\n").encode()
    start = time.perf_counter()
    answer = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(request)
            while (need := _missing(answer)) and (data := sock.recv(max(need, 4096))):
                answer += data
    except OSError:
        return 0, time.perf_counter() - start, b""
    elapsed = time.perf_counter() - start
    parts = answer.split(None, 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, elapsed, answer.partition(b"\r\n\r\n")[2]


def _missing(answer: bytes) -> int:
    """Bytes still to read of an HTTP answer; -1 (read on) until headers end."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return -1
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return max(int(value) - len(body), 0)
    return -1                 # no length: the body ends at EOF


class BenchDaemon:
    """One real daemon process tree; ``close()`` kills its whole session."""

    def __init__(self, workdir: Path, options: Options | None = None, *,
                 source: Path = REPO) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir, self.port, self.source = workdir, free_port(), source
        self.bridge = unique("ksvbk")
        self.subnet = f"10.97.{secrets.randbelow(256)}.0/24"
        self.socket_path = workdir / "run" / "cni.sock"
        self.options: Options = {
            "cni_health_server": {"host": "127.0.0.1", "port": self.port},
            "metrics": {"host": "127.0.0.1", "port": 0},
            "cni_daemon": {"bind_address": f"unix://{self.socket_path}"},
            "ipam": {"state_dir": str(workdir / "state"), "subnet": self.subnet},
            "binding": {"bridge": self.bridge},
        }
        for group, values in (options or {}).items():
            self.options.setdefault(group, {}).update(values)
        self.config = workdir / "kuryr-supervisor.conf"
        self.config.write_text("".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
            for group, values in self.options.items()))
        self.log_path = workdir / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Exec the daemon; return the ``perf_counter`` instant of the exec."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(
                   filter(None, [str(self.source), os.environ.get("PYTHONPATH")]))}
        with open(self.log_path, "ab") as log:
            started = time.perf_counter()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kuryr_supervisor.daemon",
                 "--config-file", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.source)
        return started

    @property
    def pid(self) -> int:
        assert self.proc is not None, "daemon not started"
        return self.proc.pid

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def worker_pids(self, timeout: float = 2.0) -> dict[str, int]:
        """Worker pids from ``/status`` (``components`` -> name -> ``pid``)."""
        code, body = self.get("/status", timeout)
        if code != 200:
            raise RuntimeError(f"/status answered {code}")
        return {name: int(c["pid"]) for name, c in json.loads(body)["components"].items()}

    def wait_ready(self, timeout: float = 30.0) -> None:
        try:
            wait_until(lambda: probe_once(self.port, "/ready")[0] == 200, timeout)
        except TimeoutError:
            raise RuntimeError(f"daemon not ready:\n{self.log()}") from None

    def processes(self) -> list[psutil.Process]:
        """The master and all its descendants, live now."""
        master = psutil.Process(self.pid)
        return [master, *master.children(recursive=True)]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def close(self) -> None:
        """SIGINT (a graceful stop), then SIGCONT+SIGKILL whatever is left."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        for proc in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error):
                if os.getsid(proc.pid) == self.pid:
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, ProcessLookupError, OSError):
            self.proc.wait(5)
        delete_bridge(self.bridge)


def delete_bridge(bridge: str) -> None:
    """The bridge and any host veth ends still enslaved to it."""
    listing = ip("-j", "link", "show", "master", bridge)
    if listing.returncode == 0 and listing.stdout.strip():
        for port in json.loads(listing.stdout):
            ip("link", "del", port["ifname"])
    ip("link", "del", bridge)


class Workspace:
    """Owner of every resource a benchmark run creates; see the module doc."""

    def __init__(self, source: Path = REPO) -> None:
        self.source = source
        self.tmp = Path(tempfile.mkdtemp(prefix="ksvc-bench-"))
        self.namespaces: list[str] = []
        self.bridges: list[str] = []
        self.daemons: list[BenchDaemon] = []
        self.helpers: list[subprocess.Popen[str]] = []
        self.ip_forward = IP_FORWARD.read_text() if IP_FORWARD.exists() else None

    def netns(self, count: int) -> list[str]:
        """``count`` new namespaces; returns their paths (what CNI_NETNS holds)."""
        paths = []
        for _ in range(count):
            name = unique("ksvb-")
            self.namespaces.append(name)
            if ip("netns", "add", name).returncode != 0:
                raise RuntimeError(f"ip netns add {name} failed")
            paths.append(f"/var/run/netns/{name}")
        return paths

    def bridge(self, prefix: str) -> str:
        name = unique(prefix)
        self.bridges.append(name)
        return name

    def daemon(self, options: Options | None = None, *, start: bool = True) -> BenchDaemon:
        """A daemon in its own subdirectory, started and ready unless told not."""
        daemon = BenchDaemon(self.tmp / f"daemon{len(self.daemons)}", options,
                             source=self.source)
        self.daemons.append(daemon)
        if start:
            daemon.start()
            daemon.wait_ready()
        return daemon

    def spawn(self, argv: list[str]) -> subprocess.Popen[str]:
        """A helper process (stdout piped) killed by ``close()``."""
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.helpers.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.helpers:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        for daemon in self.daemons:
            with contextlib.suppress(Exception):
                daemon.close()
        for name in self.namespaces:
            ip("netns", "del", name)
        for bridge in self.bridges:
            delete_bridge(bridge)
        if self.ip_forward is not None:
            with contextlib.suppress(OSError):
                IP_FORWARD.write_text(self.ip_forward)
        shutil.rmtree(self.tmp, ignore_errors=True)
