"""The Server worker shell: ready once accepting, heartbeats from the accept
loop, and on terminate stops accepting but lets in-flight requests finish."""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import threading
import time
from typing import Any

import pytest
from cotyledon.types import WorkerId
from oslo_config import cfg

from kuryr_supervisor import conf as conf_pkg
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.conf import binding as binding_conf
from kuryr_supervisor.state import Component, SharedState
from kuryr_supervisor.workers.assembly import locks_dir
from kuryr_supervisor.workers.server import ServerWorker
from tests.functional.cni_harness import (
    Namespaces,
    delete_bridge,
    install_shim,
    random_subnet,
    run_shim,
    unique,
)

pytestmark = pytest.mark.privileged


def make_conf(tmp: str, bridge: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_pkg.register_opts(conf)
    if "binding" not in conf:
        binding_conf.register_opts(conf)
    conf([], project="kuryr-supervisor-test", default_config_files=[])
    conf.set_override("bind_address", f"unix://{tmp}/run/cni.sock", "cni_daemon")
    conf.set_override("state_dir", f"{tmp}/state", "ipam")
    conf.set_override("subnet", str(random_subnet()), "ipam")
    conf.set_override("bridge", bridge, "binding")
    conf.set_override("heartbeat_interval", 0.1, "supervisor")
    conf.set_override("graceful_shutdown_timeout", 10, "supervisor")
    return conf


def test_serve_then_drain(tmp_path: Any, namespaces: Namespaces) -> None:
    tmp, bridge = str(tmp_path), unique("ksvcbr")
    conf = make_conf(tmp, bridge)
    state = SharedState.create(multiprocessing.get_context("fork"))
    worker = ServerWorker(WorkerId(0), state, conf, os.getppid())
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    shim = install_shim(tmp)
    netconf = {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
               "daemon_socket": f"unix://{tmp}/run/cni.sock"}
    try:
        deadline = time.monotonic() + 10
        while not state.component(Component.SERVER).ready:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        beat = state.component(Component.SERVER).heartbeat
        time.sleep(0.5)
        assert state.component(Component.SERVER).heartbeat > beat
        assert state.server_load() == (0, 64)

        cid, ns = unique("c", 20), f"/var/run/netns/{namespaces.create()}"
        locks = ContainerLocks(locks_dir(conf))
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            with locks.hold(cid, timeout=1):       # the ADD will wait for us
                pending = pool.submit(run_shim, shim, "ADD", netconf,
                                      container_id=cid, netns=ns)
                while state.server_load()[0] == 0:
                    time.sleep(0.01)
                stopper = threading.Thread(target=worker.terminate)
                stopper.start()
                time.sleep(0.3)
                assert stopper.is_alive()          # draining: waits for the ADD
                assert not os.path.exists(f"{tmp}/run/cni.sock")
                assert not state.component(Component.SERVER).ready
                # nothing listens once draining: code 11 at the deadline
                late = run_shim(shim, "DEL", {**netconf, "timeout": 1},
                                container_id="other")
                assert late[0] == 1 and late[1]["code"] == 11
            status, result = pending.result(30)
        stopper.join(10)
        assert not stopper.is_alive() and status == 0, result
        runner.join(5)
        assert not runner.is_alive()
        assert state.server_load() == (0, 64)
    finally:
        if runner.is_alive():
            worker.terminate()
        delete_bridge(bridge)
