"""podman 4.3 with its CNI backend runs a container on the kuryr network.

A real runtime end to end, with the conflist and shim as the daemon's
installer writes them: podman (libcni 1.1 inside) calls ADD when the
container starts and DEL when it is removed; inside the container eth0
must hold the allocated address and reach the gateway on the bridge.

Everything is private to the test: podman's storage (``--root``,
``--runroot``, vfs), its network config and plugin directories (a
``containers.conf`` in ``CONTAINERS_CONF``), and the image, made with
``podman import`` from a tarball of Debian's busybox-static. On this kind
of host podman needs runc, cgroupfs and explicit ulimits.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor.cni import install
from kuryr_supervisor.conf import cni_daemon, cni_install
from tests.functional.cni_harness import Daemon, ip_json, running_daemon

pytestmark = pytest.mark.privileged
BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "ip", "ping", "sleep", "cat")
RUN_FLAGS = ["--runtime", "runc", "--cgroup-manager", "cgroupfs",
             "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
             "--cap-add", "NET_RAW"]


class Podman:
    """podman with storage, config and plugins under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("bin", "net.d", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        conf = root / "containers.conf"
        conf.write_text(
            '[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n'
            'events_logger = "file"\n[network]\nnetwork_backend = "cni"\n'
            f'cni_plugin_dirs = ["{root}/bin", "/usr/lib/cni"]\n'
            f'network_config_dir = "{root}/net.d"\n')
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(root),
                    "CONTAINERS_CONF": str(conf)}
        self.base = ["podman", "--root", str(root / "storage"),
                     "--runroot", str(root / "run"), "--storage-driver", "vfs",
                     "--tmpdir", str(root / "tmp"), "--network-config-dir",
                     str(root / "net.d"), "--cgroup-manager", "cgroupfs",
                     "--runtime", "runc", "--events-backend", "file"]

    def __call__(self, *args: str, check: bool = True
                 ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.base, *args], env=self.env, capture_output=True,
                              text=True, timeout=180, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: rc={done.returncode}\n"
                                 f"{done.stdout}\n{done.stderr}")
        return done

    def close(self) -> None:
        self("rm", "--all", "--force", "--time", "0", check=False)
        self("rmi", "--all", "--force", check=False)
        prefix = str(self.root)
        with open("/proc/mounts", encoding="utf-8") as f:
            mounts = [line.split()[1] for line in f]
        for mount in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Podman, str]]:
    """A private podman and a busybox image imported from a local tarball."""
    if shutil.which("podman") is None or not os.path.exists(BUSYBOX):
        pytest.fail("podman and busybox-static must be installed (README)")
    work = tmp_path_factory.mktemp("podman")
    rootfs = work / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    tarball = work / "busybox.tar"
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
    pod = Podman(work / "podman")
    image = f"localhost/ksvc-busybox:{secrets.token_hex(4)}"
    try:
        pod("import", str(tarball), image)
        yield pod, image
    finally:
        pod.close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with running_daemon(str(tmp_path)) as d:
        yield d


def install_network(pod: Podman, daemon: Daemon, compiled: str | None) -> str:
    """The daemon's installer writes shim and conflist where podman looks."""
    name = f"ksvc-{secrets.token_hex(4)}"
    conf = cfg.ConfigOpts()
    cni_install.register_opts(conf)
    cni_daemon.register_opts(conf)
    conf([], default_config_files=[])
    for key, value in {"enabled": True, "bin_dir": str(pod.root / "bin"),
                       "conf_dir": str(pod.root / "net.d"), "network_name": name,
                       "conflist_name": f"{name}.conflist"}.items():
        conf.set_override(key, value, "cni_install")
    conf.set_override("bind_address", daemon.address, "cni_daemon")
    assert install.install_on_first_ready(conf, compiled=compiled)
    return name


def test_podman_runs_a_container_on_the_kuryr_network(
        podman: tuple[Podman, str], daemon: Daemon, shim_kind: str,
        request: pytest.FixtureRequest) -> None:
    pod, image = podman
    compiled = str(request.getfixturevalue("go_shim")) if shim_kind == "go" else None
    network = install_network(pod, daemon, compiled)
    listed = json.loads(pod("network", "ls", "--format", "json").stdout)
    assert network in {n["name"] for n in listed}
    gateway = str(daemon.subnet.network_address + 1)
    name = f"ksvc-{secrets.token_hex(4)}"

    pod("run", "-d", "--name", name, "--network", network, *RUN_FLAGS, image,
        "/bin/sleep", "300")
    try:
        (alloc,) = daemon.ipam.list()
        inside = pod("exec", name, "/bin/sh", "-c",
                     f"ip -4 -o addr show dev eth0; ping -c 2 -W 2 {gateway}").stdout
        assert f"inet {alloc.address}" in inside, inside
        assert "2 packets received" in inside, inside
        (info,) = json.loads(pod("inspect", name).stdout)
        sandbox = info["NetworkSettings"]["SandboxKey"]
        assert sandbox and os.path.exists(sandbox)
        assert len(ip_json("link", "show", "master", daemon.bridge)) == 1
    finally:
        pod("rm", "--force", "--time", "0", name)
    # DEL on removal: address released, veth gone, podman's netns gone
    assert daemon.ipam.list() == []
    assert ip_json("link", "show", "master", daemon.bridge) == []
    assert not os.path.exists(sandbox)
    assert daemon.state.cni_failures() == 0

    # a container that only runs a command: ADD, check, DEL on exit (--rm)
    done = pod("run", "--rm", "--network", network, *RUN_FLAGS, image,
               "/bin/sh", "-c", f"ip -4 -o addr show dev eth0 && ping -c 1 -W 2 {gateway}")
    assert "1 packets received" in done.stdout, done.stdout
    with contextlib.suppress(AssertionError):
        pod("rm", "--all", "--force", "--time", "0")
    assert daemon.ipam.list() == []
    assert ip_json("link", "show", "master", daemon.bridge) == []
