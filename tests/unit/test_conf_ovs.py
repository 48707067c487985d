"""[binding] driver = ovs: its options are checked before any worker starts
(one line naming the option), and ``wait_for_active_port`` unset follows the
binding."""
from __future__ import annotations

from pathlib import Path

import pytest
from oslo_config import cfg
from oslo_log import log

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.conf import cni_daemon

K8S = "[kubernetes]\napi_root = http://127.0.0.1:1\n"
PODPORT = "[cni_daemon]\naddress_source = podport\n"


def load(tmp_path: Path, text: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf_mod.register_opts(conf)
    path = tmp_path / "k.conf"
    path.write_text(text)
    conf_mod.load(conf, ["--config-file", str(path)])
    return conf


@pytest.mark.parametrize("binding,needle", [
    ("ovs_bridge = br int", "[binding] ovs_bridge"),
    ("ovs_bridge = a-name-far-too-long", "[binding] ovs_bridge"),
    ("ovs_bridge = --all", "[binding] ovs_bridge"),   # never an option
    ("ovs_bridge = br-int.100", None),
    ("ovsdb_connection = unix:relative/db.sock", "[binding] ovsdb_connection"),
    ("ovsdb_connection = ssl:1.2.3.4:6640", "[binding] ovsdb_connection"),
    ("ovsdb_connection = tcp:127.0.0.1", "[binding] ovsdb_connection"),
    ("ovsdb_connection = tcp:127.0.0.1:6640", None),
    ("ovsdb_timeout = 0.1", "[binding] ovsdb_timeout"),
    ("ovs_tx_checksum_off = maybe", "[binding] ovs_tx_checksum_off"),
])
def test_ovs_options_are_checked(tmp_path: Path, binding: str,
                                 needle: str | None) -> None:
    text = f"[binding]\ndriver = ovs\n{binding}\n{PODPORT}{K8S}"
    if needle is None:
        load(tmp_path, text)
        return
    with pytest.raises(conf_mod.ConfigError) as err:
        load(tmp_path, text)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_ovs_needs_the_podport(tmp_path: Path) -> None:
    """A made-up iface-id binds nothing: the embedded IPAM is refused."""
    with pytest.raises(conf_mod.ConfigError,
                       match=r"driver = ovs needs \[cni_daemon\] address_source"):
        load(tmp_path, "[binding]\ndriver = ovs\n")
    # the bad values of the unused driver are not looked at
    load(tmp_path, "[binding]\novsdb_connection = nonsense\n")


@pytest.mark.parametrize("driver,value,expected", [
    ("bridge", None, False), ("ovs", None, True),
    ("bridge", "true", True), ("ovs", "false", False),
])
def test_wait_for_active_follows_the_binding(tmp_path: Path, driver: str,
                                             value: str | None,
                                             expected: bool) -> None:
    text = f"[binding]\ndriver = {driver}\n{K8S}{PODPORT}"
    if value is not None:
        text += f"wait_for_active_port = {value}\n"
    conf = load(tmp_path, text)
    assert conf.cni_daemon.wait_for_active_port is (
        None if value is None else value == "true")
    assert cni_daemon.wait_for_active(conf) is expected
