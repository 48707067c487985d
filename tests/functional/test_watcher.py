"""The Watcher worker in its own process, against the fake API over HTTP.

The child process builds a real ``WatcherWorker`` (shared state, heartbeat,
registry file, a real IpamStore for reclaim) and reports on stdout; the test
looks at what a Server process would see: the registry file, the store.
"""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from kuryr_supervisor.cni.ipam import IpamStore, PodRef
from kuryr_supervisor.kubernetes.registry import PodRegistry, registry_path
from tests.fixtures.fakeapi import FakeAPI

SUBNET = "10.77.0.0/22"
ROOT = Path(__file__).parents[2]


def child_main(settings_json: str) -> None:
    """Run a WatcherWorker until SIGTERM (executed in a fresh interpreter)."""
    import multiprocessing
    import signal
    import threading

    from oslo_config import cfg

    from kuryr_supervisor import conf as conf_pkg
    from kuryr_supervisor.cni.ipam import IpamStore
    from kuryr_supervisor.state import Component, SharedState
    from kuryr_supervisor.workers.watcher import WatcherWorker

    settings = json.loads(settings_json)
    conf = cfg.ConfigOpts()
    conf_pkg.register_opts(conf)
    conf([], default_config_files=[])
    for group, opts in settings["conf"].items():
        for name, value in opts.items():
            conf.set_override(name, value, group)
    store = IpamStore(settings["ipam_db"], ipaddress.IPv4Network(SUBNET))

    def hooks(_: cfg.ConfigOpts) -> tuple[Any, Any]:
        return store.list, lambda a: store.release(a.container_id, a.ifname)
    WatcherWorker.allocation_hooks = staticmethod(hooks)  # type: ignore[assignment]

    started = time.monotonic()
    state = SharedState.create(multiprocessing.get_context("fork"))
    worker = WatcherWorker(0, state, conf, os.getppid())  # type: ignore[arg-type]
    signal.signal(signal.SIGTERM, lambda *_: worker.stopping.set())

    def report() -> None:
        while not state.component(Component.WATCHER).ready:
            time.sleep(0.005)
        print(f"READY {time.monotonic() - started:.4f}", flush=True)
        last = state.component(Component.WATCHER).heartbeat
        while not worker.stopping.wait(1.0):
            beat = state.component(Component.WATCHER).heartbeat
            print(f"BEAT {beat - last:.3f}", flush=True)
            last = beat
    threading.Thread(target=report, daemon=True).start()
    worker.run()
    worker.terminate()
    print("STOPPED", flush=True)


class Child:
    def __init__(self, tmp: Path, api: FakeAPI | None, **conf: Any) -> None:
        self.state_dir = tmp / "state"
        self.ipam_db = str(tmp / "ipam.sqlite")
        groups: dict[str, dict[str, Any]] = {
            "ipam": {"state_dir": str(self.state_dir)},
            "supervisor": {"heartbeat_interval": 0.1},
            "watcher": {"reclaim_interval": 0.3, "backoff_max": 0.5},
            "kubernetes": {"watch_timeout": 2, "request_timeout": 2}}
        if api is not None:
            groups["kubernetes"].update(api_root=api.url, node_name="node-a")
        for key, value in conf.items():
            group, name = key.split("__")
            groups.setdefault(group, {})[name] = value
        self.store = IpamStore(self.ipam_db, ipaddress.IPv4Network(SUBNET))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("KUBERNETES_")}
        settings = json.dumps({"conf": groups, "ipam_db": self.ipam_db})
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from tests.functional."
             "test_watcher import child_main; child_main(sys.argv[1])",
             settings], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)

    def line(self, prefix: str, timeout: float = 30) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith(prefix):
                return line.split(None, 1)[1].strip() if " " in line else ""
        raise AssertionError(f"no {prefix} line from the watcher")

    @property
    def registry(self) -> PodRegistry:
        return PodRegistry(registry_path(str(self.state_dir)))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def eventually(cond: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.05)


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI(bookmark_interval=0.5).start()
    yield fake
    fake.stop()


def test_watcher_syncs_this_nodes_pods_and_reclaims(api: FakeAPI,
                                                    tmp_path: Path) -> None:
    for i in range(20):
        api.add_pod("ns", f"mine-{i}", "node-a")
        api.add_pod("ns", f"theirs-{i}", "node-b")
    child = Child(tmp_path, api)
    try:
        doomed = api.pods[("ns", "mine-3")]["metadata"]["uid"]
        child.store.allocate("cid-3", "eth0", netns="/proc/1/ns/net",
                             pod=PodRef("ns", "mine-3", doomed))
        child.store.allocate("cid-4", "eth0", netns="/proc/1/ns/net",
                             pod=PodRef("ns", "mine-4", api.pods[
                                 ("ns", "mine-4")]["metadata"]["uid"]))
        child.line("READY")
        names = {p.name for p in child.registry.all()}
        assert names == {f"mine-{i}" for i in range(20)}
        assert len(child.store.list()) == 2          # nothing leaked yet
        api.delete_pod("ns", "mine-3")
        api.add_pod("ns", "late", "node-a")
        eventually(lambda: [a.container_id for a in child.store.list()]
                   == ["cid-4"])
        eventually(lambda: {"late"} <= {p.name for p in child.registry.all()})
        assert child.registry.get("ns", "mine-3") is None
        # an API outage: the worker keeps heartbeating, then catches up
        api.fail(500)
        for _ in range(2):
            assert float(child.line("BEAT")) > 0
        api.fail(None)
        api.add_pod("ns", "after-outage", "node-a")
        eventually(lambda: child.registry.get("ns", "after-outage") is not None)
    finally:
        child.stop()
    assert child.proc.returncode == 0


def test_standalone_reclaims_allocations_whose_netns_is_gone(
        tmp_path: Path) -> None:
    netns = tmp_path / "netns"
    netns.mkdir()
    (netns / "a").touch()
    (netns / "b").touch()
    child = Child(tmp_path, None)
    try:
        for name in ("a", "b"):
            child.store.allocate(f"cid-{name}", "eth0",
                                 netns=str(netns / name),
                                 pod=PodRef("", "", ""))
        child.line("READY")
        (netns / "a").unlink()
        eventually(lambda: [a.container_id for a in child.store.list()]
                   == ["cid-b"])
        assert not child.registry.synced()
    finally:
        child.stop()


def test_figures_500_pods(api: FakeAPI, tmp_path: Path) -> None:
    """Start-to-synced time and memory (USS) with 500 pods on the node."""
    for i in range(500):
        api.add_pod(f"ns-{i % 10}", f"pod-{i}", "node-a")
        api.add_pod(f"ns-{i % 10}", f"other-{i}", "node-b")
    child = Child(tmp_path, api)
    try:
        in_process = float(child.line("READY"))
        wall = time.monotonic() - child.started
        assert len(child.registry.all()) == 500
        time.sleep(1.0)
        info = psutil.Process(child.proc.pid).memory_full_info()
        figures = {"pods": 500, "worker_start_to_synced_s": round(in_process, 3),
                   "spawn_to_synced_s": round(wall, 3),
                   "uss_mib": round(info.uss / 2**20, 1),
                   "rss_mib": round(info.rss / 2**20, 1)}
        print("WATCHER FIGURES", json.dumps(figures))
        (tmp_path.parent / "watcher-figures.json").write_text(
            json.dumps(figures))
        assert in_process < 5
    finally:
        child.stop()
