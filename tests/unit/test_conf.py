"""Configuration loading, validation and safe reload."""
from __future__ import annotations

from pathlib import Path

import pytest
from oslo_config import cfg
from oslo_log import log

from kuryr_supervisor import conf as conf_mod


def fresh() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf_mod.register_opts(conf)
    return conf


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_embedded_defaults_are_valid(tmp_path: Path) -> None:
    conf = fresh()
    conf_mod.load(conf, ["--config-file", write(tmp_path / "empty.conf", "")])
    assert conf.cni_health_server.port == 8090
    assert conf.cni_health_server.max_memory_usage == -1
    assert conf.cni_daemon.cni_failures_count == 3
    assert conf.supervisor.graceful_shutdown_timeout < 30


@pytest.mark.parametrize("group,option,value", [
    ("supervisor", "max_restarts", "many"),
    ("supervisor", "worker_death_policy", "explode"),
    ("cni_health_server", "port", "99999"),
    ("cni_daemon", "cni_failures_count", "0"),
    ("health", "check_interval", "-1"),
    ("metrics", "port", "8090"),            # the probe port
])
def test_bad_value_is_named(tmp_path: Path, group: str, option: str,
                            value: str) -> None:
    path = write(tmp_path / "k.conf", f"[{group}]\n{option} = {value}\n")
    with pytest.raises(conf_mod.ConfigError) as err:
        conf_mod.load(fresh(), ["--config-file", path])
    message = str(err.value)
    assert f"[{group}] {option}" in message and "\n" not in message


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(conf_mod.ConfigError, match="nope.conf"):
        conf_mod.load(fresh(), ["--config-file", str(tmp_path / "nope.conf")])


def test_reload_applies_mutable_and_refuses_invalid(tmp_path: Path) -> None:
    path = tmp_path / "k.conf"
    write(path, "[cni_health_server]\nmax_memory_usage = 10\n")
    conf = fresh()
    conf_mod.load(conf, ["--config-file", str(path)])
    write(path, "[cni_health_server]\nmax_memory_usage = 500\n")
    assert conf_mod.reload(conf) is True
    assert conf.cni_health_server.max_memory_usage == 500
    write(path, "[cni_health_server]\nmax_memory_usage = lots\n")
    assert conf_mod.reload(conf) is False
    assert conf.cni_health_server.max_memory_usage == 500


def test_role_is_checked_with_one_line(tmp_path: Path) -> None:
    for argv, needle in ((["--role", "bogus"], "invalid value for role"),
                         (["--role", "controller"], "needs the Kubernetes API")):
        conf = fresh()
        with pytest.raises(conf_mod.ConfigError, match=needle):
            conf_mod.load(conf, argv + ["--config-file", write(tmp_path / "e.conf", "")])
    conf = fresh()
    conf_mod.load(conf, ["--role", "controller", "--config-file", write(
        tmp_path / "c.conf", "[kubernetes]\napi_root = http://127.0.0.1:1\n"
        "[controller]\npod_network_id = net\n")])
    assert conf.role == "controller"
    conf = fresh()
    with pytest.raises(conf_mod.ConfigError, match="pod_network_id"):
        conf_mod.load(conf, ["--role", "controller", "--config-file", write(
            tmp_path / "d.conf", "[kubernetes]\napi_root = http://127.0.0.1:1\n")])


@pytest.mark.parametrize("source", ["podport", "annotation"])
def test_podport_source_needs_kubernetes(tmp_path: Path, source: str) -> None:
    """``annotation`` is the deprecated alias of ``podport``: same rules."""
    path = write(tmp_path / "p.conf", f"[cni_daemon]\naddress_source = {source}\n")
    with pytest.raises(conf_mod.ConfigError, match=f"{source} needs the Kubernetes"):
        conf_mod.load(fresh(), ["--config-file", path])
    path = write(tmp_path / "q.conf", f"[cni_daemon]\naddress_source = {source}\n"
                 "[kubernetes]\napi_root = http://127.0.0.1:1\n")
    conf = fresh()
    conf_mod.load(conf, ["--config-file", path])
    assert conf.cni_daemon.address_source == source


@pytest.mark.parametrize("value,ok", [("blue", True), ("a" * 64, True),
                                      ("a" * 65, False), ("two words", False),
                                      ("x,y", False)])
def test_cluster_id_is_checked(tmp_path: Path, value: str, ok: bool) -> None:
    """It becomes a Neutron tag and a filter value: checked at start."""
    load_controller(tmp_path, f"cluster_id = {value}\n",
                    None if ok else r"\[controller\] cluster_id")


def load_controller(tmp_path: Path, extra: str, refused: str | None) -> None:
    """A controller's file, ``[controller]`` then ``extra``: it loads,
    or (``refused``) stops with one line matching it."""
    path = write(tmp_path / "c.conf", "[kubernetes]\napi_root = http://127.0.0.1:1\n"
                 f"[controller]\npod_network_id = net\n{extra}")
    argv = ["--role", "controller", "--config-file", path]
    if refused is None:
        conf_mod.load(fresh(), argv)
        return
    with pytest.raises(conf_mod.ConfigError, match=refused):
        conf_mod.load(fresh(), argv)


@pytest.mark.parametrize("line,ok", [
    ("endpoint_override = http://neutron.internal:9696", True),
    ("endpoint_override = https://10.0.0.5:9696/networking", True),
    ("endpoint_override = neutron:9696", False),
    ("endpoint_override = http://", False),
    ("valid_interfaces = internal,public", True),
    ("valid_interfaces = internalURL", False),
    ("region_name = RegionTwo", True),
    ("service_type =", False)])
def test_neutron_endpoint_options_are_checked(tmp_path: Path, line: str,
                                              ok: bool) -> None:
    """Which Neutron endpoint ([neutron], keystoneauth's adapter options):
    a bad one stops the start with one line naming it."""
    load_controller(tmp_path, f"[neutron]\n{line}\n",
                    None if ok else rf"\[neutron\] {line.split()[0]}")
