"""[network_policy]: the default groups must be Neutron ids, checked as
the files are loaded (one line naming the option: exit 78), only where
the controller runs handlers."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kuryr_supervisor import conf as conf_mod
from tests.unit.test_services_conf import CONTROLLER, load

GROUP = "6f1c2a9e-5d0b-4c3a-9e8f-1a2b3c4d5e6f"


def test_the_default_groups_are_ids(tmp_path: Path) -> None:
    pytest.importorskip("keystoneauth1")
    bad = CONTROLLER + "handlers = network_policy\n[network_policy]\n" \
        "default_security_groups = default\n"
    with pytest.raises(conf_mod.ConfigError) as err:
        load(tmp_path, bad)
    assert str(err.value) == (
        "invalid value for [network_policy] default_security_groups: "
        "'default' is not a security group id")
    conf = load(tmp_path, CONTROLLER + "handlers = network_policy\n"
                f"[network_policy]\ndefault_security_groups = {GROUP}\n")
    assert conf.network_policy.default_security_groups == [GROUP]
    assert conf.network_policy.resync_interval == 60.0


def test_check_config_exits_78_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "k.conf"
    path.write_text(CONTROLLER + "handlers = network_policy\n"
                    "[network_policy]\ndefault_security_groups = x\n")
    done = subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", "check-config",
         "--config-file", str(path)], capture_output=True, text=True,
        timeout=60, check=False)
    assert done.returncode == 78, done
    [line] = done.stderr.strip().splitlines()
    assert "[network_policy] default_security_groups" in line
