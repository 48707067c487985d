"""The controller role run as its Deployment runs it: a real daemon as the
Deployment's ``runAsUser``/``runAsGroup`` (through setpriv: no
supplementary group, no new privileges, no capability but
``CAP_DAC_READ_SEARCH`` to read this run's interpreter and checkout, see
:mod:`tests.fixtures.unprivileged`) against the Kubernetes,
Keystone and Neutron fakes over real HTTP.

Its files are made as the kubelet makes them: the credentials root's with
the Secret's ``defaultMode`` plus group read for ``fsGroup``, the state
volume a real tmpfs mounted with a size only (an ``emptyDir`` of medium
Memory: its root is root's, mode 1777) then given ``fsGroup`` (group, g+rw,
setgid), and ``[ipam] state_dir`` the ConfigMap's, below it. The daemon
becomes ready, creates a port and its PodPort for a pod, and stops on
SIGTERM with 0; it refuses (78, one line) a state directory of another
uid, and a disk-backed ``emptyDir`` (0777 without the sticky bit).

Fake only: the claim is the daemon's files and privileges, which no cloud
changes.
"""
from __future__ import annotations

import configparser
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.controller import Cloud, cloud_fixture, controller_daemon
from tests.fixtures.daemon import Daemon, wait_until

pytestmark = pytest.mark.privileged
cloud = pytest.fixture(cloud_fixture)

MANIFESTS = Path(__file__).parents[2] / "etc" / "kubernetes" / "controller"
#: CAP_DAC_READ_SEARCH (bit 2) alone: read and search, never write.
READ_ONLY = f"{1 << 2:016x}"
OTHER = 65534                       # nobody: some other unprivileged uid


def deployment() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(
        (MANIFESTS / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    return spec


POD = deployment()["securityContext"]
UID, GID, FS_GROUP = POD["runAsUser"], POD["runAsGroup"], POD["fsGroup"]
VOLUMES = {v["name"]: v for v in deployment()["volumes"]}
SECRET_MODE = VOLUMES["credentials"]["secret"]["defaultMode"] | 0o440


def state_dir_name() -> str:
    """The ConfigMap's ``[ipam] state_dir``, last component."""
    data = yaml.safe_load((MANIFESTS / "configmap.yaml").read_text())["data"]
    parser = configparser.ConfigParser()
    parser.read_string(data["kuryr-supervisor.conf"])
    return os.path.basename(parser["ipam"]["state_dir"])


def apply_fs_group(path: Path) -> None:
    """The kubelet's ownership change for ``fsGroup`` on a writable
    directory volume: its group, group read/write/search and setgid
    added to the mode it has."""
    mode = stat.S_IMODE(path.stat().st_mode)
    os.chown(path, -1, FS_GROUP)
    os.chmod(path, mode | 0o660 | 0o110 | stat.S_ISGID)


@pytest.fixture
def base() -> Iterator[Path]:
    """Root's, 0755, in /tmp: reachable by the daemon's uid (pytest's own
    base directory is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="ks-nonroot-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def memory_volume(base: Path) -> Iterator[Path]:
    """An ``emptyDir`` of medium Memory: a real tmpfs, as the kubelet
    mounts it (a size, no mode), then ``fsGroup``."""
    volume = base / "state-volume"
    volume.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                    str(volume)], check=True)
    try:
        st = volume.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o1777)
        apply_fs_group(volume)
        yield volume
    finally:
        subprocess.run(["umount", str(volume)], check=True)


def as_deployed(base: Path, cloud: Cloud, volume: Path) -> Daemon:
    """The controller daemon with the Deployment's uid, state directory and
    credentials file (the fixture's config holds the Neutron password)."""
    d = controller_daemon(base / "work", cloud, {
        "ipam": {"state_dir": str(volume / state_dir_name())}})
    os.chown(d.config, 0, FS_GROUP)
    os.chmod(d.config, SECRET_MODE)
    d.run_as = (UID, GID)
    return d


def credentials(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    keys = ("Uid", "Gid", "Groups", "CapPrm", "CapEff", "CapBnd",
            "NoNewPrivs")
    return {k: " ".join(fields[k].split()) for k in keys}


def test_runs_as_the_deployments_uid(base: Path, cloud: Cloud,
                                     memory_volume: Path) -> None:
    d = as_deployed(base, cloud, memory_volume)
    d.start()
    try:
        d.wait_ready(30)
        pids = {d.pid, *d.worker_pids().values()}
        assert len(pids) == 3                 # master, handler, health
        for pid in pids:
            assert credentials(pid) == {
                "Uid": f"{UID} {UID} {UID} {UID}",
                "Gid": f"{GID} {GID} {GID} {GID}", "Groups": "",
                "CapPrm": READ_ONLY, "CapEff": READ_ONLY,
                "CapBnd": READ_ONLY, "NoNewPrivs": "1"}, pid
        pod = cloud.api.add_pod("default", "web", "node-a")
        uid = pod["metadata"]["uid"]
        note = wait_until(lambda: cloud.podport("default", "web"), 15)
        [port] = cloud.neutron.ports_for(uid)
        assert note["portId"] == port["id"] and note["podUid"] == uid
        state = memory_volume / state_dir_name()
        st = state.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (UID, 0o700)
        lock = state / "daemon.lock"
        assert lock.stat().st_uid == UID
        assert lock.read_text() == f"{d.pid}\n"
        assert "holds a secret" not in d.log()     # the credentials: private
        assert d.status()["handlerFailures"] == 0
        d.signal(signal.SIGTERM)
        assert d.wait_exit(30) == 0, d.log()
    finally:
        d.close()


def refused(base: Path, cloud: Cloud, volume: Path) -> str:
    """Start it as deployed; it must exit 78 at once. Its one line."""
    d = as_deployed(base, cloud, volume)
    done = subprocess.run(d.command(), capture_output=True, text=True,
                          timeout=60, cwd="/")
    assert done.returncode == 78, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_a_state_dir_of_another_uid_is_refused(base: Path, cloud: Cloud,
                                               memory_volume: Path) -> None:
    state = memory_volume / state_dir_name()
    state.mkdir(mode=0o700)
    os.chown(state, OTHER, OTHER)
    line = refused(base, cloud, memory_volume)
    assert line == (f"kuryr-supervisor: configuration error: [ipam] "
                    f"state_dir {state}: {state} is owned by uid {OTHER}, "
                    f"not root or uid {UID}; refusing a state directory "
                    "another user could change")
    assert os.listdir(state) == []


def test_a_disk_backed_empty_dir_is_refused(base: Path, cloud: Cloud) -> None:
    """The kubelet makes a disk-backed ``emptyDir`` 0777, not sticky: any
    uid could rename the state directory away, so it is no ancestor to
    trust (the Deployment's volume is of medium Memory)."""
    volume = base / "disk-volume"
    volume.mkdir()
    volume.chmod(0o777)
    apply_fs_group(volume)
    line = refused(base, cloud, volume)
    assert f"{volume} is writable by group or others (mode 2777)" in line
    assert os.listdir(volume) == []
