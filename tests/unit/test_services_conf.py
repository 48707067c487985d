"""[services] and the ``octavia`` readiness check: the service subnet is
required where the services handler runs (one line naming the option, as
the files are loaded: exit 78), and readiness names Octavia, built only
there, against the Octavia fake: up, down, hung (bounded by the check's
wait, the adapter's words naming Octavia)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from oslo_config import cfg
from oslo_log import log

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.master.roles import dependencies
from tests.fixtures.lbclouds import LbCloud

CONTROLLER = ("[DEFAULT]\nrole = controller\n[kubernetes]\n"
              "api_root = http://127.0.0.1:1\n[controller]\n"
              "pod_network_id = net\n")


def load(tmp_path: Path, text: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf_mod.register_opts(conf)
    path = tmp_path / "k.conf"
    path.write_text(text)
    conf_mod.load(conf, ["--config-file", str(path)])
    return conf


def test_the_service_subnet_is_required_by_the_handler(tmp_path: Path) -> None:
    pytest.importorskip("keystoneauth1")
    with pytest.raises(conf_mod.ConfigError) as err:
        load(tmp_path, CONTROLLER + "handlers = neutron_port, services\n")
    assert str(err.value) == ("invalid value for [services] "
                              "service_subnet_id: required by the services "
                              "handler")
    load(tmp_path, CONTROLLER + "handlers = neutron_port, services\n"
         "[services]\nservice_subnet_id = svc\n")
    # not asked of a controller without the handler, nor of the CNI role
    load(tmp_path, CONTROLLER + "handlers = neutron_port\n")
    load(tmp_path, "[controller]\nhandlers = services\n")


def test_check_config_exits_78_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "k.conf"
    path.write_text(CONTROLLER + "handlers = services\n")
    done = subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", "check-config",
         "--config-file", str(path)], capture_output=True, text=True,
        timeout=60, check=False)
    assert done.returncode == 78, done
    [line] = done.stderr.strip().splitlines()
    assert "[services] service_subnet_id" in line


def checks(octavia: LbCloud, tmp_path: Path, handlers: str,
           **controller: object) -> list[object]:
    conf = octavia.conf(tmp_path, handlers=handlers, **controller)
    conf.set_override("role", "controller")
    return list(dependencies.openstack_checks(conf))


def test_the_octavia_check_only_where_services_run(fake_octavia: LbCloud,
                                                  tmp_path: Path) -> None:
    names = [c.name for c in checks(fake_octavia, tmp_path, "neutron_port")]
    assert names == ["keystone", "neutron"]
    names = [c.name for c in checks(fake_octavia, tmp_path,
                                    "neutron_port,services")]
    assert names == ["keystone", "neutron", "octavia"]


def test_the_octavia_check_names_octavia(fake_octavia: LbCloud,
                                         tmp_path: Path) -> None:
    fake = fake_octavia.fake
    assert fake is not None
    [check] = [c for c in checks(fake_octavia, tmp_path, "services",
                                 openstack_timeout=0.5,
                                 openstack_check_interval=0.1)
               if c.name == "octavia"]
    assert isinstance(check, dependencies.OctaviaCheck)
    now = time.monotonic()
    ok = check.run(now)
    assert ok.ok and ok.message == "Octavia answers"
    fake.down()
    down = check.run(now + 1)
    assert not down.ok and down.message.startswith("Octavia does not answer")
    fake.up()
    fake.hang = 30.0
    start = time.monotonic()
    hung = check.run(now + 2)
    assert not hung.ok and "no answer within" in hung.message, hung
    assert time.monotonic() - start < check.timeout() + 1.0
    fake.hang = 0.0
