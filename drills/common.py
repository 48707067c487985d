"""What every drill shares: the report, the workspace, the shim, leak checks.

Invariants:
- everything a drill creates (temporary directory, ``ksvx-<hex>`` network
  namespaces, the daemons with their bridges and veths, every process of
  every daemon session) is registered in a :class:`Workspace` and removed
  when it closes, whether the drill passed, failed or raised;
- checks go through independent tools (``ip``, ``sqlite3``, ``/proc``), not
  through the code under test, except :class:`IpamStore.list`, the store's
  own reader;
- the only traffic is on loopback and inside our own namespaces.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import clients as builds
from kuryr_supervisor.cni import shim
from kuryr_supervisor.cni.binding import HOST_PREFIX, BridgeBinding
from kuryr_supervisor.errors import WIRE
from tests.fixtures.daemon import Daemon, session_pids, wait_until

LOG = logging.getLogger("drills")

HOST_PATH = "/usr/bin:/bin"
NETNS_DIR = "/var/run/netns"
#: Every CNI error code the daemon or the shim may answer.
CNI_CODES = frozenset(w.code for w in WIRE.values())


@dataclasses.dataclass
class Report:
    """What a drill checked, its figures, and every violated invariant."""

    name: str
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)
    failures: list[str] = dataclasses.field(default_factory=list)
    #: failures matching a bug already reported (see the drill's KNOWN_BUGS)
    known: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def check(self, condition: bool, what: str) -> bool:
        if not condition:
            self.failures.append(what)
        return condition

    def render(self) -> str:
        lines = [f"== {self.name}: {'PASS' if self.ok else 'FAIL'}"]
        lines += [f"   {k}: {v}" for k, v in self.figures.items()]
        lines += [f"   known bug: {k}" for k in self.known]
        lines += [f"   FAILED: {f}" for f in self.failures[:20]]
        if len(self.failures) > 20:
            lines.append(f"   ... and {len(self.failures) - 20} more")
        return "\n".join(lines)


def eventually(predicate: Any, timeout: float) -> bool:
    """Whether ``predicate`` came true within ``timeout`` (polled every 20 ms):
    a drill records a miss as a figure instead of failing on the spot."""
    try:
        wait_until(predicate, timeout, interval=0.02)
        return True
    except TimeoutError:
        return False


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def ip(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True,
                          text=True)


def ip_json(*args: str) -> Any:
    done = ip("-j", *args)
    if done.returncode != 0 or not done.stdout.strip():
        return []
    return json.loads(done.stdout)


@dataclasses.dataclass
class ShimCall:
    """One shim run: exit status, parsed stdout (None if not JSON), time."""

    status: int
    answer: Any
    seconds: float
    stdout: str
    stderr: str

    @property
    def code(self) -> int | None:
        ok = isinstance(self.answer, dict) and isinstance(self.answer.get("code"), int)
        return self.answer["code"] if ok else None

    def problem(self) -> str | None:
        """Why this answer breaks the CNI contract, or None."""
        if "Traceback" in self.stderr or "Traceback" in self.stdout:
            return f"traceback: {self.stderr[-300:]}"
        if self.status == 0:
            return None if isinstance(self.answer, dict) or not self.stdout \
                else f"exit 0 with non-JSON output {self.stdout[:200]!r}"
        if self.status != 1 or self.code not in CNI_CODES:
            return f"exit {self.status}, not a CNI error: {self.stdout[:200]!r}"
        if not {"cniVersion", "code", "msg"} <= set(self.answer):
            return f"CNI error without cniVersion/code/msg: {self.answer}"
        return None


def install_shim(path: Path, kind: str = "python", source: Path | None = None) -> str:
    """Install ``kuryr-cni`` at ``path`` as a runtime would find it.

    ``kind`` "go" builds the compiled shim with ``cmd/kuryr-cni/build.sh``
    (of ``source``, a tree exported from another revision, when given: an
    earlier release's shim with that release's daemon), "python" copies the
    Python shim alone. Why both: a drill must prove what the runtime
    actually runs, and the compiled shim is what ``pip install .`` ships.
    """
    if kind == "go":
        tree = source or builds.REPO
        builds.run_go([str(tree / "cmd" / "kuryr-cni" / "build.sh"), str(path)],
                      tree, builds.go_env())
    elif kind == "python":
        module = Path(shim.__file__)
        if source is not None:
            module = source / "kuryr_supervisor" / "cni" / "shim.py"
            if not module.exists():            # releases before cni/
                module = source / "kuryr_supervisor" / "shim.py"
        shutil.copyfile(module, path)
    else:
        raise ValueError(f"unknown shim kind {kind!r} (go or python)")
    os.chmod(path, 0o755)
    return str(path)


def export_tree(rev: str, into: Path) -> str:
    """The whole tree of git revision ``rev`` of this checkout under ``into``
    (``git archive``); its full commit id. Raises if the revision is unknown:
    a drill against a missing release must fail, not quietly measure HEAD."""
    commit = subprocess.run(
        ["git", "-C", str(builds.REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=False)
    if commit.returncode != 0:
        raise RuntimeError(f"git revision {rev!r} is not in {builds.REPO}: "
                           f"{commit.stderr.strip()} (a clone with full history?)")
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(builds.REPO), "archive",
                              commit.stdout.strip()], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return commit.stdout.strip()


def source_env(source: Path | None) -> dict[str, str] | None:
    """The environment that runs the daemon of tree ``source`` with this
    interpreter (``PYTHONPATH`` first, before the installed package), or
    None for this checkout. ``PYTHONSAFEPATH``: ``python -m`` would put the
    current directory (often this checkout) before ``PYTHONPATH``."""
    if source is None:
        return None
    env = dict(os.environ, PYTHONSAFEPATH="1")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(source), os.environ.get("PYTHONPATH")]))
    return env


class Workspace:
    """A temporary directory, namespaces and daemons, all removed on close.

    ``source``: a tree exported from another revision whose daemon (and
    shim) the drill runs instead of this checkout's; ``shim``: "python"
    (default) or "go", the compiled one.
    """

    def __init__(self, name: str, source: Path | None = None,
                 shim: str = "python") -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"ksvx-{name}-"))
        self.namespaces: list[str] = []
        self.daemons: list[Daemon] = []
        self.sessions: set[int] = set()
        self.source = source
        self.shim_kind = shim
        try:
            self.shim_path = install_shim(self.root / "kuryr-cni", shim, source)
        except Exception:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def netns(self) -> str:
        """A fresh namespace; its path (``/var/run/netns/ksvx-<hex>``)."""
        name = "ksvx-" + secrets.token_hex(5)
        ip("netns", "add", name, check=True)
        self.namespaces.append(name)
        return f"{NETNS_DIR}/{name}"

    def daemon(self, options: dict[str, dict[str, Any]] | None = None,
               source: Path | None = None) -> Daemon:
        """A daemon of ``source`` (default: the workspace's tree)."""
        workdir = self.root / f"d{len(self.daemons)}"
        workdir.mkdir()
        opts: dict[str, dict[str, Any]] = {
            "supervisor": {"max_restarts": 100000, "restart_backoff_max": 0.5}}
        for group, values in (options or {}).items():
            opts.setdefault(group, {}).update(values)
        daemon = Daemon(workdir, opts, env=source_env(source or self.source))
        self.daemons.append(daemon)
        return daemon

    def start(self, daemon: Daemon) -> Daemon:
        """Start (or start again) ``daemon``; remember its session."""
        daemon.start()
        self.sessions.add(daemon.pid)
        return daemon

    def netconf(self, daemon: Daemon, timeout: float = 30.0,
                version: str = "1.1.0") -> dict[str, Any]:
        return {"cniVersion": version, "name": "kuryr", "type": "kuryr-cni",
                "daemon_socket": f"unix://{daemon.socket_path}",
                "timeout": timeout}

    def shim(self, command: str, netconf: dict[str, Any] | str, *,
             container_id: str = "", netns: str = "", ifname: str = "eth0",
             limit: float = 60.0) -> ShimCall:
        """Run the installed shim like a runtime does."""
        env = {"PATH": HOST_PATH, "CNI_COMMAND": command,
               "CNI_PATH": "/opt/cni/bin", "CNI_IFNAME": ifname}
        if container_id:
            env["CNI_CONTAINERID"] = container_id
        if netns:
            env["CNI_NETNS"] = netns
        stdin = netconf if isinstance(netconf, str) else json.dumps(netconf)
        start = time.monotonic()
        try:
            done = subprocess.run([self.shim_path], input=stdin, env=env,
                                  text=True, capture_output=True, timeout=limit)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout if isinstance(exc.stdout, str) else ""
            return ShimCall(-1, None, time.monotonic() - start, out, "hung")
        seconds = time.monotonic() - start
        try:
            answer = json.loads(done.stdout) if done.stdout.strip() else None
        except ValueError:
            answer = None
        return ShimCall(done.returncode, answer, seconds, done.stdout,
                        done.stderr)

    def close(self) -> None:
        for daemon in self.daemons:
            with contextlib.suppress(Exception):
                delete_bridge_ports(str(daemon.options["binding"]["bridge"]))
                daemon.close()
        kill_sessions(self.sessions)
        for name in self.namespaces:
            ip("netns", "del", name)
        shutil.rmtree(self.root, ignore_errors=True)


def delete_bridge_ports(bridge: str) -> None:
    for port in ip_json("link", "show", "master", bridge):
        ip("link", "del", port["ifname"])


def kill_sessions(sessions: set[int]) -> None:
    for sid in sessions:
        for pid in session_pids(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)


def leftover_processes(sessions: set[int]) -> set[int]:
    return {pid for sid in sessions for pid in session_pids(sid)}


def leaked_links(bridge: str, container_ids: list[str],
                 ifname: str = "eth0") -> list[str]:
    """Host veths left behind: ports of ``bridge`` and, bridged or not, any
    host end named after one of ``container_ids``."""
    ports = {p["ifname"] for p in ip_json("link", "show", "master", bridge)}
    return sorted({p for p in ports if p.startswith(HOST_PREFIX)}
                  | set(host_ends(container_ids, ifname)))


def host_ends(container_ids: list[str], ifname: str = "eth0") -> list[str]:
    """The host veth ends, existing now, of these attachments."""
    host = {link["ifname"] for link in ip_json("link")}
    mine = {BridgeBinding.host_ifname(cid, ifname) for cid in container_ids}
    return sorted(host & mine)


def pod_links(netns: str) -> list[str]:
    """Interfaces in a namespace other than its loopback."""
    name = os.path.basename(netns)
    return [link["ifname"] for link in ip_json("-n", name, "link")
            if link["ifname"] != "lo"]


def integrity(db_path: str) -> str:
    """SQLite's own verdict on the allocation store ("ok" when sound)."""
    conn = sqlite3.connect(db_path, timeout=10)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def db_path(daemon: Daemon) -> str:
    return os.path.join(str(daemon.options["ipam"]["state_dir"]), "ipam.sqlite")


def stop(daemon: Daemon, timeout: float = 15.0) -> int | None:
    """SIGTERM and wait; the exit status, None if it did not exit."""
    daemon.signal(signal.SIGTERM)
    try:
        return daemon.wait_exit(timeout)
    except subprocess.TimeoutExpired:
        return None


def wait_ready(daemon: Daemon, timeout: float = 20.0) -> bool:
    try:
        wait_until(lambda: daemon.probe("/ready") == 200, timeout)
        return True
    except TimeoutError:
        return False
