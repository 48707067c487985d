"""A real runtime library drives both shims: cnitool on Debian's libcni 1.1.

libcni 1.1 is what containerd 1.6/1.7 and podman 4 vendor: it ignores
``cniVersions``, asks in the conflist's top-level ``cniVersion`` and refuses
a result it cannot parse. So these tests run the conflists we ship as they
are installed: written by the daemon's installer (``[cni_install]``, shim
and conflist into a bin and a net.d directory) or copied from
``etc/cni/net.d`` with only ``daemon_socket`` pointed at the test's daemon.
ADD, CHECK (from libcni's cached result), DEL and a repeated DEL, each
checked with ``ip`` in the namespace and in the daemon's allocations.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from kuryr_supervisor.cni import install
from kuryr_supervisor.conf import cni_daemon, cni_install
from tests.fixtures.clients import REPO
from tests.functional.cni_harness import Daemon, Namespaces, ip_json, running_daemon

pytestmark = pytest.mark.privileged
SHIPPED = REPO / "etc" / "cni" / "net.d" / "10-kuryr.conflist"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with running_daemon(str(tmp_path)) as d:
        yield d


def install_as_the_daemon_does(daemon: Daemon, root: Path, shim_kind: str,
                               go_shim: Path | None) -> None:
    """``[cni_install]`` into ``root/bin`` and ``root/net.d``."""
    conf = cfg.ConfigOpts()
    cni_install.register_opts(conf)
    cni_daemon.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("enabled", True, "cni_install")
    conf.set_override("bin_dir", str(root / "bin"), "cni_install")
    conf.set_override("conf_dir", str(root / "net.d"), "cni_install")
    conf.set_override("bind_address", daemon.address, "cni_daemon")
    compiled = str(go_shim) if shim_kind == "go" else None
    assert install.install_on_first_ready(conf, compiled=compiled)
    head = (root / "bin" / "kuryr-cni").read_bytes()[:4]
    assert (head == b"\x7fELF") == (shim_kind == "go")


def copy_shipped(daemon: Daemon | str, root: Path, shim_kind: str,
                 go_shim: Path | None, **plugin: Any) -> None:
    """The shipped conflist pointed at ``daemon`` (or an address), with
    ``plugin``'s keys set in the plugin's configuration."""
    (root / "bin").mkdir(parents=True)
    (root / "net.d").mkdir()
    install.install_shim(str(root / "bin"),
                         compiled=str(go_shim) if shim_kind == "go" else None)
    conflist = json.loads(SHIPPED.read_text())
    conflist["plugins"][0]["daemon_socket"] = (
        daemon if isinstance(daemon, str) else daemon.address)
    conflist["plugins"][0].update(plugin)
    (root / "net.d" / "10-kuryr.conflist").write_text(json.dumps(conflist))


class Cnitool:
    def __init__(self, binary: Path, root: Path) -> None:
        self.binary, self.root = binary, root

    def __call__(self, command: str, netns: str, network: str = "kuryr"
                 ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binary), command, network, netns],
                              env=self.env(), capture_output=True, text=True,
                              timeout=120, check=False)

    def start(self, command: str, netns: str, network: str = "kuryr"
              ) -> subprocess.Popen[str]:
        """The same call left running (the caller communicates)."""
        return subprocess.Popen([str(self.binary), command, network, netns],
                                env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "NETCONFPATH": str(self.root / "net.d"),
                "CNI_PATH": str(self.root / "bin"), "CNI_IFNAME": "eth0",
                "CNI_CACHE_DIR": str(self.root / "cache")}


@pytest.mark.parametrize("conflist", ["installed", "shipped"])
def test_add_check_del_del(cnitool: Path, daemon: Daemon, namespaces: Namespaces,
                           tmp_path: Path, shim_kind: str, conflist: str,
                           request: pytest.FixtureRequest) -> None:
    go_shim = request.getfixturevalue("go_shim") if shim_kind == "go" else None
    root = tmp_path / "host"
    (install_as_the_daemon_does if conflist == "installed" else copy_shipped)(
        daemon, root, shim_kind, go_shim)
    tool = Cnitool(cnitool, root)
    ns = namespaces.create()
    netns = f"/var/run/netns/{ns}"

    done = tool("add", netns)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["cniVersion"] == "1.0.0"
    (ip,) = result["ips"]
    addrs = [f"{a['local']}/{a['prefixlen']}" for link in ip_json("-n", ns, "addr")
             if link["ifname"] == "eth0" for a in link["addr_info"]
             if a["family"] == "inet"]
    assert addrs == [ip["address"]]
    (alloc,) = daemon.ipam.list()
    assert alloc.container_id.startswith("cnitool-")

    done = tool("check", netns)
    assert done.returncode == 0, done.stderr
    # CHECK notices a pod interface that lost its address
    subprocess.run(["ip", "-n", ns, "addr", "flush", "dev", "eth0"], check=True)
    done = tool("check", netns)
    assert done.returncode != 0 and done.stderr.strip()

    for _ in range(2):
        done = tool("del", netns)
        assert done.returncode == 0, done.stderr
    assert ip_json("-n", ns, "link", "show", "eth0") == []
    assert daemon.ipam.list() == [] and daemon.state.cni_failures() == 0
    assert not any(os.scandir(root / "cache" / "results"))


def test_daemon_down_is_try_again(cnitool: Path, daemon: Daemon,
                                  namespaces: Namespaces, tmp_path: Path,
                                  shim_kind: str, request: pytest.FixtureRequest
                                  ) -> None:
    go_shim = request.getfixturevalue("go_shim") if shim_kind == "go" else None
    root = tmp_path / "host"
    copy_shipped(daemon, root, shim_kind, go_shim, timeout=1)
    daemon.server.stop_accepting()
    done = Cnitool(cnitool, root)("add", f"/var/run/netns/{namespaces.create()}")
    assert done.returncode != 0
    # once the deadline has passed: the shim retried until then (the socket
    # file stays: it is the master's, and nothing listens on it now)
    assert "kuryr-supervisor is unreachable" in done.stderr
    assert "connection refused; " in done.stderr
    assert " attempts in " in done.stderr


def test_add_issued_before_the_daemon_starts(cnitool: Path, namespaces: Namespaces,
                                             tmp_path: Path, shim_kind: str,
                                             request: pytest.FixtureRequest) -> None:
    """libcni's ADD while the daemon is down (a restart, an upgrade) waits
    for it and succeeds; the runtime sees latency, not an error."""
    go_shim = request.getfixturevalue("go_shim") if shim_kind == "go" else None
    root, workdir = tmp_path / "host", tmp_path / "daemon"
    workdir.mkdir()
    copy_shipped(f"unix://{workdir}/run/cni.sock", root, shim_kind, go_shim)
    ns = namespaces.create()
    tool = Cnitool(cnitool, root)
    adding = tool.start("add", f"/var/run/netns/{ns}")
    try:
        time.sleep(0.5)
        assert adding.poll() is None           # waiting, not failed
        with running_daemon(str(workdir)) as daemon:
            out, err = adding.communicate(timeout=60)
            assert adding.returncode == 0, err
            (ip,) = json.loads(out)["ips"]
            (alloc,) = daemon.ipam.list()
            assert str(alloc.address).split("/")[0] == ip["address"].split("/")[0]
            assert tool("del", f"/var/run/netns/{ns}").returncode == 0
            assert daemon.ipam.list() == []
    finally:
        if adding.poll() is None:
            adding.kill()
            adding.wait(5)
