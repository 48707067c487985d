"""The CNI socket's preflight checks belong to the role that serves it: the
controller role binds no CNI socket, so its ``bind_address`` (the default,
or a path under a directory another user owns) neither stops it nor
answers for a CNI daemon listening there on the same host. Each role's
object runs them (:meth:`~kuryr_supervisor.master.roles.base.Role.validate`,
:meth:`~kuryr_supervisor.master.roles.base.Role.preflight`), as the daemon
and check-config do."""
from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.master import preflight, roles
from tests.fixtures.daemon import free_port

pytestmark = pytest.mark.privileged


def conf_for(role: str, tmp_path: Path, bind_address: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("role", role)
    conf.set_override("bind_address", bind_address, "cni_daemon")
    conf.set_override("state_dir", str(tmp_path / "state"), "ipam")
    conf.set_override("host", "127.0.0.1", "cni_health_server")
    conf.set_override("port", free_port(), "cni_health_server")
    conf.set_override("port", 0, "metrics")
    return conf


@pytest.fixture
def foreign(tmp_path: Path) -> str:
    """A socket path in a directory of uid 65534."""
    run = tmp_path / "run"
    run.mkdir()
    os.chown(run, 65534, 65534)
    return f"unix://{run}/cni.sock"


def test_an_untrusted_socket_directory_stops_the_cni_role(
        tmp_path: Path, foreign: str) -> None:
    with pytest.raises(preflight.PreflightError,
                       match=r"\[cni_daemon\] bind_address .* uid 65534"):
        roles.named("cni").validate(conf_for("cni", tmp_path, foreign))


def test_the_controller_role_does_not_check_a_socket_it_never_binds(
        tmp_path: Path, foreign: str) -> None:
    roles.named("controller").validate(
        conf_for("controller", tmp_path, foreign))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A CNI socket somebody (the node's CNI daemon) listens on."""
    path = tmp_path / "live" / "cni.sock"
    path.parent.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(path))
        live.listen(1)
        yield f"unix://{path}"


def test_a_live_socket_is_another_cni_daemon_only_to_the_cni_role(
        tmp_path: Path, served: str) -> None:
    with pytest.raises(preflight.AddressTaken,
                       match="another server is listening"):
        roles.named("cni").preflight(conf_for("cni", tmp_path / "a", served))
    lock = roles.named("controller").preflight(
        conf_for("controller", tmp_path / "b", served))
    lock.close()


def test_a_held_tcp_cni_address_names_its_holder(tmp_path: Path) -> None:
    """A TCP ``bind_address`` (Kuryr's ``127.0.0.1:5036``) someone holds is
    :class:`~preflight.AddressTaken` with the holder's pid, as the probe
    port is; one the host lacks is the configuration's fault."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        with pytest.raises(preflight.AddressTaken,
                           match=rf"\[cni_daemon\] bind_address {address} "
                                 rf"is held by pid {os.getpid()} "):
            roles.named("cni").preflight(
                conf_for("cni", tmp_path / "a", address))
    with pytest.raises(preflight.PreflightError,
                       match=r"bind_address 192\.0\.2\.1:5036: Cannot assign"):
        roles.named("cni").preflight(
            conf_for("cni", tmp_path / "b", "192.0.2.1:5036"))
