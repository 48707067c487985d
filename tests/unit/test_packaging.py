"""What ships beside the code: the systemd unit and the generated sample config."""
from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "kuryr-supervisor.service"


def unit() -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return parser


def test_unit_file_verifies(tmp_path: Path) -> None:
    daemon = shutil.which("kuryr-supervisor")
    assert daemon, "kuryr-supervisor is not installed"
    text = UNIT.read_text().replace("/usr/local/bin/kuryr-supervisor", daemon)
    copy = tmp_path / "kuryr-supervisor.service"
    copy.write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", str(copy)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout


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


def test_every_option_is_documented_in_readme() -> None:
    readme = (ROOT / "README.rst").read_text()
    missing = [f"[{group}] {opt.name}" for group, opts in conf_mod.list_opts()
               for opt in opts
               if f"``[{group}]``" not in readme or f"``{opt.name}``" not in readme]
    assert not missing, f"options missing from README.rst: {missing}"


def test_standalone_master_does_not_import_the_kubernetes_client() -> None:
    """~30 MiB and ~0.2 s of start-up a standalone daemon must not pay."""
    code = ("import sys, kuryr_supervisor.daemon, kuryr_supervisor.master.manager; "
            "print('kubernetes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
