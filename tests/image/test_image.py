"""The built container image (``tox -e image``; skipped elsewhere): its
``kuryr-supervisor --version``, its shim, and the daemon serving a real ADD
into a network namespace with the DaemonSet's securityContext: read-only
root, the runtime's default seccomp profile, no privilege escalation, and
only NET_ADMIN and SYS_ADMIN."""
from __future__ import annotations

import configparser
import json
import os
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("KURYR_SUPERVISOR_IMAGE", "")
pytestmark = pytest.mark.skipif(
    not IMAGE, reason="KURYR_SUPERVISOR_IMAGE unset: run `tox -e image`")
# podman without systemd as PID 1 and without crun; runc may not raise
# rlimits here, so they are given explicitly.
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
DAEMONSET_SECURITY = ["--cap-drop", "ALL", "--cap-add", "NET_ADMIN",
                      "--cap-add", "SYS_ADMIN",
                      "--security-opt", "no-new-privileges",
                      "--read-only", "--tmpfs", "/tmp"]


def podman(*args: str, timeout: float = 120,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True,
                          timeout=timeout, check=check)


def declared_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser["metadata"]["version"]


def test_version() -> None:
    done = podman("run", "--rm", *LIMITS, IMAGE, "--version")
    assert done.stdout.strip() == declared_version()


def run_shim(path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODMAN, "run", "--rm", "-i", *LIMITS, "-e", "CNI_COMMAND=VERSION",
         "--entrypoint", path, IMAGE],
        input='{"cniVersion": "1.0.0"}', capture_output=True, text=True,
        timeout=120)


COMPILED = "/opt/kuryr-supervisor/lib/python3.11/site-packages/" \
    "kuryr_supervisor/cni/bin/kuryr-cni"


def test_python_shim_answers_version() -> None:
    done = run_shim("/opt/kuryr-supervisor/bin/kuryr-cni")
    assert done.returncode == 0, done.stderr
    assert '"supportedVersions"' in done.stdout


@pytest.mark.skipif(not (ROOT / "cmd/kuryr-cni/go.mod").exists(),
                    reason="no compiled shim in this tree (cmd/kuryr-cni)")
def test_compiled_shim_is_where_the_installer_looks() -> None:
    done = run_shim(COMPILED)
    assert done.returncode == 0, done.stderr
    assert '"supportedVersions"' in done.stdout
    file = podman("run", "--rm", *LIMITS, "--entrypoint", "head", IMAGE,
                  "-c", "4", COMPILED).stdout
    assert file.startswith("\x7fELF")


def test_daemon_ready_with_the_daemonset_capabilities(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    conf = tmp_path / "etc" / "kuryr-supervisor.conf"
    conf.write_text("[cni_health_server]\nhost = 127.0.0.1\nport = 8090\n"
                    "[metrics]\nport = 8091\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    name = f"kuryr-image-test-{uuid.uuid4().hex[:8]}"
    netns = f"kimg-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    podman("run", "-d", "--name", name, "--network", "none", *LIMITS,
           *DAEMONSET_SECURITY, "-v", f"{tmp_path / 'etc'}:/etc/kuryr-supervisor:ro",
           "-v", "/run/netns:/run/netns:rslave",
           # The DaemonSet's hostPath: the state outlives the container.
           "-v", f"{state}:/var/lib/kuryr-supervisor", IMAGE)
    try:
        probe = ("import urllib.request as u; "
                 "print(u.urlopen('http://127.0.0.1:8090/ready', timeout=1)"
                 ".status)")
        deadline = time.monotonic() + 60
        while True:
            done = podman("exec", name, "python3", "-c", probe, check=False)
            if done.stdout.strip() == "200":
                break
            assert time.monotonic() < deadline, podman("logs", name).stderr
            time.sleep(1)
        caps = podman("exec", name, "grep", "CapEff", "/proc/1/status").stdout
        assert int(caps.split()[1], 16) == (1 << 12) | (1 << 21)
        # A real ADD through the shim: veth, setns into the pod's namespace
        # (SYS_ADMIN, allowed by the default seccomp profile only with it).
        add = subprocess.run(
            [*PODMAN, "exec", "-i", "-e", "CNI_COMMAND=ADD",
             "-e", "CNI_CONTAINERID=imagetest0001", "-e", "CNI_IFNAME=eth0",
             "-e", f"CNI_NETNS=/run/netns/{netns}", "-e", "CNI_PATH=/opt/cni/bin",
             name, "/opt/kuryr-supervisor/bin/kuryr-cni"],
            input=json.dumps({"cniVersion": "1.0.0", "name": "kuryr",
                              "type": "kuryr-cni"}),
            capture_output=True, text=True, timeout=60)
        assert add.returncode == 0, add.stdout + add.stderr
        assert json.loads(add.stdout)["ips"], add.stdout
        link = subprocess.run(["ip", "-n", netns, "-o", "addr", "show", "eth0"],
                              capture_output=True, text=True, check=True)
        assert "inet " in link.stdout
        podman("stop", "-t", "30", name, timeout=60)
        state = podman("inspect", "-f", "{{.State.ExitCode}}", name).stdout
        assert state.strip() == "0"           # SIGTERM drained, exit 0
    finally:
        podman("rm", "-f", name, check=False)
        subprocess.run(["ip", "netns", "del", netns], check=False)


CONTROLLER = ROOT / "etc" / "kubernetes" / "controller"


def test_controller_as_its_deployment_runs_it(tmp_path: Path) -> None:
    """The image runs the controller role as the Deployment does: its uid,
    group and fsGroup, no capability, no privilege escalation, a read-only
    root, the ConfigMap's configuration and a root-owned credentials file
    readable by fsGroup only, the state directory on a tmpfs of mode 1777
    (a memory-backed emptyDir). Against the fakes on the host's loopback
    it becomes ready and creates a pod's port and PodPort."""
    import yaml

    from tests.fixtures.controller import start_cloud
    from tests.fixtures.daemon import free_port, wait_until
    spec = yaml.safe_load((CONTROLLER / "deployment.yaml").read_text())[
        "spec"]["template"]["spec"]
    pod = spec["securityContext"]
    (container,) = spec["containers"]
    secret_mode = {v["name"]: v for v in spec["volumes"]}["credentials"][
        "secret"]["defaultMode"] | 0o440
    config = yaml.safe_load((CONTROLLER / "configmap.yaml").read_text())[
        "data"]["kuryr-supervisor.conf"]
    cloud = start_cloud()
    port, metrics = free_port(), free_port()
    etc, creds = tmp_path / "etc", tmp_path / "credentials"
    for path in (etc, creds):
        path.mkdir()
        path.chmod(0o755)
    (etc / "kuryr-supervisor.conf").write_text(config)
    # The Secret's file, with what the fakes need on top of the ConfigMap.
    neutron = creds / "neutron.conf"
    lines = [f"[kubernetes]\napi_root = {cloud.api.url}",
             f"[controller]\npod_network_id = {cloud.neutron.network_id}",
             f"[cni_health_server]\nport = {port}",
             f"[metrics]\nport = {metrics}", "[neutron]"]
    lines += [f"{k} = {v}" for k, v in cloud.keystone.conf_overrides().items()]
    neutron.write_text("\n".join(lines) + "\n")
    os.chown(neutron, 0, pod["fsGroup"])
    neutron.chmod(secret_mode)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    name = f"kuryr-image-ctl-{uuid.uuid4().hex[:8]}"
    podman("run", "-d", "--name", name, "--network", "host", *LIMITS,
           "--user", f"{pod['runAsUser']}:{pod['runAsGroup']}",
           "--group-add", str(pod["fsGroup"]),
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
           "--read-only", "--tmpfs", f"{mounts['tmp']}:rw,size=16m,mode=1777",
           "--tmpfs", f"{mounts['state']}:rw,size=1m,mode=1777",
           "-v", f"{etc}:{mounts['config']}:ro",
           "-v", f"{creds}:{mounts['credentials']}:ro",
           "-e", f"POD_NAME={name}", "--entrypoint", container["command"][0],
           IMAGE, *container["command"][1:])
    try:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/ready", timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False
        try:
            wait_until(ready, 60, interval=0.5)
        except TimeoutError:
            raise AssertionError(podman("logs", name).stderr) from None
        status = podman("exec", name, "grep", "-E", "^(Uid|CapEff)",
                        "/proc/1/status").stdout.split()
        assert status == ["Uid:", *[str(pod["runAsUser"])] * 4,
                          "CapEff:", "0000000000000000"]
        added = cloud.api.add_pod("default", "web", "node-a")
        note = wait_until(lambda: cloud.podport("default", "web"), 30)
        [made] = cloud.neutron.ports_for(added["metadata"]["uid"])
        assert note["portId"] == made["id"]
        logs = podman("logs", name).stderr
        assert "holds a secret" not in logs and "cannot set nice" not in logs
        podman("stop", "-t", "30", name, timeout=60)
        code = podman("inspect", "-f", "{{.State.ExitCode}}", name).stdout
        assert code.strip() == "0"
    finally:
        podman("rm", "-f", name, check=False)
        cloud.stop()
