"""What ships beside the code: the systemd unit and the generated sample config."""
from __future__ import annotations

import configparser
import os
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.cni import sockets
from kuryr_supervisor.master import activation, listeners, reporting
from tests.fixtures import docs
from tests.fixtures.tree import copy_checkout

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "kuryr-supervisor.service"
SOCKET = ROOT / "systemd" / "kuryr-supervisor.socket"
#: One socket unit per listener, each naming its descriptor for the daemon.
SOCKETS = {listeners.CNI: SOCKET,
           listeners.PROBES: ROOT / "systemd" / "kuryr-supervisor-probes.socket",
           listeners.METRICS: ROOT / "systemd" / "kuryr-supervisor-metrics.socket"}


def unit(path: Path = UNIT) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path)
    return parser


def test_unit_file_verifies() -> None:
    proc = subprocess.run(["systemd-analyze", "verify", str(UNIT)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_socket_unit_verifies_with_the_service(tmp_path: Path) -> None:
    proc = subprocess.run(["systemd-analyze", "verify",
                           *map(str, SOCKETS.values()), str(UNIT)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # The check can fail: a socket unit naming a service that is not there.
    broken = tmp_path / "kuryr-supervisor.socket"
    broken.write_text(SOCKET.read_text().replace(
        "Service=kuryr-supervisor.service", "Service=nowhere.service"))
    proc = subprocess.run(["systemd-analyze", "verify", str(broken)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0


def test_socket_unit_matches_the_daemon() -> None:
    """The socket systemd holds is the one the daemon would bind, under the
    same trust rules, named as the daemon matches it; the service keeps the
    directory (and so the socket file) when it stops."""
    sock = unit(SOCKET)["Socket"]
    path, _ = sockets.parse_address(sockets.DEFAULT_ADDRESS)
    assert sock["ListenStream"] == path
    assert (sock["SocketMode"], sock["DirectoryMode"]) == ("0600", "0700")
    assert sock["FileDescriptorName"] == listeners.CNI
    assert sock["Service"] == UNIT.name
    service = unit()
    assert service["Service"]["RuntimeDirectoryPreserve"] == "yes"
    assert service["Service"]["RuntimeDirectory"] == os.path.basename(
        os.path.dirname(path))
    assert SOCKET.name in service["Install"]["Also"].split()


def test_every_listener_has_a_socket_unit() -> None:
    """The probe and metrics ports too: systemd binds them at boot, before
    a local user could take them, at the addresses the daemon is
    configured with by default and under the names it matches."""
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    wanted = activation.wanted(conf)
    service = unit()
    for role, path in SOCKETS.items():
        sock = unit(path)["Socket"]
        assert sock["FileDescriptorName"] == role
        assert sock["Service"] == UNIT.name
        want = wanted[role]
        listen = want if isinstance(want, str) else f"{want[0]}:{want[1]}"
        assert sock["ListenStream"] == listen, role
        assert unit(path)["Install"]["WantedBy"] == "sockets.target"
        assert path.name in service["Install"]["Also"].split()
        assert path.name in service["Service"]["Sockets"].split()


def exposure(path: Path) -> float:
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(path)],
        capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)",
                      proc.stdout)
    assert match, proc.stdout + proc.stderr
    return float(match.group(1))


def test_unit_exposure_is_at_most_5(tmp_path: Path) -> None:
    assert exposure(UNIT) <= 5.0
    # The measurement can fail: the same unit without its hardening is UNSAFE.
    bare = tmp_path / "kuryr-supervisor.service"
    text = UNIT.read_text().split("# Hardening")[0] + "\n[Install]\n" \
        "WantedBy=multi-user.target\n"
    bare.write_text(text)
    assert exposure(bare) > 9.0


def test_unit_names_no_installation_directory() -> None:
    service = unit()["Service"]
    assert "/usr/local/bin" not in service["ExecStart"]
    assert service["ExecStart"].startswith("/usr/bin/env kuryr-supervisor ")
    path = service["Environment"].removeprefix("PATH=").split(":")
    assert path[0] == "/opt/kuryr-supervisor/bin"      # the README's venv
    assert "/usr/bin" in path


def test_start_timeout_covers_the_start_extensions() -> None:
    """An API outage at boot must not become a start-timeout loop: the
    daemon extends the start timeout while alive, before the old one ends."""
    service = unit()["Service"]
    start = int(service["TimeoutStartSec"])
    assert reporting.START_EXTEND_EVERY < start
    assert reporting.START_EXTEND_EVERY * 1_000_000 < reporting.START_EXTEND_USEC
    caps = set(service["CapabilityBoundingSet"].split())
    # test_capabilities.py proves the first two; test_priority.py the third.
    assert caps == {"CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_NICE"}


def test_the_documented_capabilities_are_the_units() -> None:
    text = " ".join((ROOT / "doc" / "source" / "install" / "systemd.rst")
                    .read_text().split())
    found = re.search(r"``CapabilityBoundingSet`` is ``([A-Z_ ]+)``", text)
    assert found, "systemd.rst names no CapabilityBoundingSet"
    assert found[1].split() == unit()["Service"]["CapabilityBoundingSet"].split()


def build_wheel(tmp: Path, *, path: str) -> tuple[Path, str]:
    """A wheel of a copy of the tree (no build/ or built shim of the
    checkout's own), built with ``PATH=path``; the wheel and pip's -v log."""
    tree = copy_checkout(tmp / "tree")
    env = dict(os.environ, PATH=path,
               # Go's build cache shared with the suite's other shim builds.
               GOCACHE=str(ROOT / "build" / "gocache"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-v", "-w", str(tmp),
                           str(tree)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = tmp.glob("kuryr_supervisor-*.whl")
    return wheel, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel_with_go(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    go = shutil.which("go")
    assert go, "CI installs golang-go: the wheel build must find Go"
    return build_wheel(tmp_path_factory.mktemp("wheel-go"),
                       path=os.environ.get("PATH", "/usr/bin:/bin"))


@pytest.fixture(scope="module")
def wheel_without_go(tmp_path_factory: pytest.TempPathFactory
                     ) -> tuple[Path, str]:
    empty = tmp_path_factory.mktemp("no-go-path")
    return build_wheel(tmp_path_factory.mktemp("wheel-nogo"), path=str(empty))


SHIM_IN_WHEEL = "kuryr_supervisor/cni/bin/kuryr-cni"


def elf_interpreter(data: bytes) -> bool:
    """Whether a 64-bit little-endian ELF asks for a dynamic loader."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3
               for i in range(phnum))          # PT_INTERP


@pytest.mark.build
def test_wheel_built_with_go_carries_the_static_shim(
        wheel_with_go: tuple[Path, str]) -> None:
    wheel, log = wheel_with_go
    assert "-py3-none-linux_" in wheel.name      # a binary inside: not "any"
    archive = zipfile.ZipFile(wheel)
    info = archive.getinfo(SHIM_IN_WHEEL)
    assert info.external_attr >> 16 & 0o111       # installed executable
    assert not elf_interpreter(archive.read(SHIM_IN_WHEEL))   # static
    assert "built the compiled CNI shim" in log


@pytest.mark.build
def test_wheel_built_without_go_says_how_to_get_the_compiled_shim(
        wheel_without_go: tuple[Path, str]) -> None:
    wheel, log = wheel_without_go
    assert wheel.name.endswith("-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert SHIM_IN_WHEEL not in names
    assert "kuryr_supervisor/cni/shim.py" in names
    (line,) = [ln for ln in log.splitlines()
               if "carries the Python CNI shim" in ln]
    assert "no Go on PATH" in line and "golang-go" in line


@pytest.mark.build
def test_wheel_ships_unit_sample_config_and_license(
        wheel_with_go: tuple[Path, str]) -> None:
    wheel, _ = wheel_with_go
    names = zipfile.ZipFile(wheel).namelist()
    data = {n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n}
    assert data >= {"share/kuryr-supervisor/systemd/kuryr-supervisor.service",
                    "share/kuryr-supervisor/systemd/kuryr-supervisor.socket",
                    "share/kuryr-supervisor/systemd/"
                    "kuryr-supervisor-probes.socket",
                    "share/kuryr-supervisor/systemd/"
                    "kuryr-supervisor-metrics.socket",
                    "share/kuryr-supervisor/kuryr-supervisor.conf.sample",
                    "share/doc/kuryr-supervisor/LICENSE"}
    assert any(n.endswith(".dist-info/licenses/LICENSE")
               or n.endswith(".dist-info/LICENSE") for n in names)
    assert "Apache License" in (ROOT / "LICENSE").read_text()


def test_unit_matches_the_daemon() -> None:
    service = unit()["Service"]
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert int(service["WatchdogSec"]) > 0
    assert service["Restart"] == "on-failure"
    assert service["KillMode"] == "mixed"
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    graceful = conf.supervisor.graceful_shutdown_timeout
    assert int(service["TimeoutStopSec"]) > graceful
    assert "78" in service["RestartPreventExitStatus"].split()


def test_sample_config_is_current(tmp_path: Path) -> None:
    out = tmp_path / "sample.conf"
    subprocess.run(
        ["oslo-config-generator", "--config-file",
         str(ROOT / "etc/oslo-config-generator/kuryr-supervisor.conf"),
         "--output-file", str(out)], check=True, cwd=ROOT, timeout=60)
    committed = ROOT / "etc" / "kuryr-supervisor.conf.sample"
    assert committed.read_text() == out.read_text(), (
        "etc/kuryr-supervisor.conf.sample is stale: run `tox -e genconfig`")


def test_every_option_is_documented() -> None:
    """Besides the generated reference (doc/source/configuration), the
    pages name every option where they explain it."""
    readme = docs.text()
    missing = [f"[{group}] {opt.name}" for group, opts in conf_mod.list_opts()
               for opt in opts
               if f"``[{group}]``" not in readme or f"``{opt.name}``" not in readme]
    assert not missing, f"options missing from the docs: {missing}"


def test_standalone_master_does_not_import_the_kubernetes_client() -> None:
    """~30 MiB and ~0.2 s of start-up a standalone daemon must not pay."""
    code = ("import sys, kuryr_supervisor.daemon, kuryr_supervisor.master.manager; "
            "print('kubernetes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.privileged        # the CNI socket's directory: root's
def test_reload_checks_the_config_before_the_signal(tmp_path: Path) -> None:
    """ExecReload= runs check-config on ExecStart's files, then SIGHUP; the
    check refuses a bad file (78) so systemd never sends the signal."""
    reloads = [line.split("=", 1)[1] for line in UNIT.read_text().splitlines()
               if line.startswith("ExecReload=")]
    assert len(reloads) == 2 and reloads[1] == "/bin/kill -HUP $MAINPID"
    check = reloads[0].split()
    start = unit()["Service"]["ExecStart"].split()
    assert check[:3] == ["/usr/bin/env", "kuryr-supervisor", "check-config"]
    assert check[3:] == start[2:]          # the same files as the daemon
    conf = tmp_path / "k.conf"
    args = [sys.executable, "-m", "kuryr_supervisor.daemon", *check[2:3],
            "--config-file", str(conf)]
    conf.write_text("[supervisor]\nrestart_window = soon\n")
    bad = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 78 and "restart_window" in bad.stderr
    conf.write_text(f"[ipam]\nstate_dir = {tmp_path / 'state'}\n")
    good = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert (good.returncode, good.stdout) == (0, "ok\n"), good.stderr
