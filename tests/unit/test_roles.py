"""Each role is one object naming its workers (and how many), listeners,
HealthManager checks, preflight checks, shared-state sections and hooks;
the master and everything below it are told what they need, never the
role's name."""
from __future__ import annotations

import multiprocessing
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.master import roles
from kuryr_supervisor.master.activation import CNI, METRICS, PROBES
from kuryr_supervisor.master.listeners import Listeners
from kuryr_supervisor.netcheck.node import assembly
from kuryr_supervisor.state import Component, Section, SharedState

ROOT = Path(__file__).resolve().parents[2]


def conf_for(role: str, **controller: object) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("role", role)
    for name, value in controller.items():
        conf.set_override(name, value, "controller")
    return conf


def assembled(name: str, conf: cfg.ConfigOpts
              ) -> tuple[roles.Role, dict[str, dict[str, Any]]]:
    role = roles.named(name)
    with socket.socket() as probe:
        sockets = Listeners(probe=probe)
        return role, {w.__name__: kw for w, kw in role.workers(conf, sockets)}


def test_every_role_is_named_by_its_value() -> None:
    assert roles.NAMES == conf_mod.controller.ROLES
    for name in roles.NAMES:
        assert roles.named(name).name == name
    with pytest.raises(ValueError, match="no role named 'base'"):
        roles.named("base")


def test_the_cni_role() -> None:
    conf = conf_for("cni")
    role, workers = assembled("cni", conf)
    assert list(workers) == ["WatcherWorker", "ServerWorker",
                             "HealthManagerWorker"]
    assert role.components(conf) == (Component.WATCHER, Component.SERVER,
                                     Component.HEALTH)
    health = workers["HealthManagerWorker"]
    assert health["node_network"] is assembly.build
    assert health["check_factory"].__name__ == "node_checks"
    assert "listener" in workers["ServerWorker"]
    assert role.listeners == (CNI, PROBES, METRICS)
    assert role.sections == {Section.CNI_STATUS, Section.LOST_PORTS}
    assert [c.__name__ for c in role.checks()] == ["cni_socket_path"]
    hooks = role.hooks(conf)
    assert (len(hooks.ready), len(hooks.stopped), len(hooks.exited)) == \
        (1, 1, 2)
    assert role.installs_shim


def test_the_controller_role() -> None:
    conf = conf_for("controller", handlers=["neutron_port", "network_health"])
    role, workers = assembled("controller", conf)
    assert list(workers) == ["HandlerWorker", "HealthManagerWorker"]
    # One Handler process per handler: a slot each.
    assert [c.label for c in role.components(conf)] == [
        "handler:neutron_port", "handler:network_health", "health"]
    health = workers["HealthManagerWorker"]
    assert health["node_network"] is None
    assert health["check_factory"].__name__ == \
        "dependency_checks"
    assert health["base_checks"].__name__ == "controller_checks"
    assert role.listeners == (PROBES, METRICS)
    assert role.sections == {Section.POOLS, Section.CREATES,
                             Section.VERDICTS, Section.LOAD_BALANCERS,
                             Section.POLICIES}
    assert [c.__name__ for c in role.checks()] == ["handlers_installed"]
    assert role.hooks(conf) == roles.Hooks()
    assert not role.installs_shim


@pytest.mark.parametrize("name", roles.NAMES)
def test_only_the_roles_sections_are_shared(name: str) -> None:
    """A board the role declares is shared with its workers; another is
    the process's own (empty, never None)."""
    role = roles.named(name)
    ctx = multiprocessing.get_context("fork")
    state = SharedState.create(ctx, sections=role.sections)
    assert state.sections == role.sections

    def write() -> None:
        state.pools.publish(0, "p@node-a", used=1, free=3)
        state.cni_status.count_write(True)
    child = ctx.Process(target=write)
    child.start()
    child.join(10)
    assert child.exitcode == 0
    pools = [r["node"] for r in state.pools.rows()]
    assert (pools == ["node-a"]) is (Section.POOLS in role.sections)
    ok, _ = state.cni_status.writes()
    assert (ok == 1) is (Section.CNI_STATUS in role.sections)


def test_no_branch_on_the_role_outside_the_role_objects() -> None:
    """Code below the roles is handed what it needs, never the role."""
    branch = re.compile(r"conf\.role\s*[!=]=")
    found = [str(path.relative_to(ROOT))
             for path in (ROOT / "kuryr_supervisor").rglob("*.py")
             if "master/roles/" not in path.as_posix()
             and branch.search(path.read_text())]
    assert found == []
