"""The User-Agent that names the replica on every request, as the servers
see it: the OpenStack adapter's (Keystone's logins and Neutron's calls)
and the Kubernetes adapter's, over real HTTP to the fakes."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import useragent
from kuryr_supervisor.conf import kubernetes as k8s_conf
from kuryr_supervisor.controller.leadership.election import identity
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.version import version
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.openstack import FakeKeystone, FakeNeutron
from tests.unit.test_openstack import neutron_conf

AGENT = re.compile(r"kuryr-supervisor/\S+ \((cni|controller); ([^;()]+); "
                   r"pid (\d+)\)")


#: The master's pid as a worker is given it (never this process's).
MASTER = 4242


def test_format_names_role_name_and_master_pid() -> None:
    agent = useragent.user_agent("controller", "ctl-7d9f-x2", MASTER)
    assert agent == f"kuryr-supervisor/{version()} (controller; ctl-7d9f-x2; pid 4242)"
    # A process with no master (a tool, the master itself): its own.
    assert useragent.for_role("cni", "n", None).endswith(
        f"; pid {os.getpid()})")
    assert useragent.for_role("cni", "n", MASTER).endswith("; pid 4242)")


def test_a_hostile_name_stays_one_comment_field() -> None:
    agent = useragent.user_agent("cni", "evil); x=(1;\r\nInjected: y\\",
                                 MASTER)
    assert "\r" not in agent and "\n" not in agent
    m = AGENT.fullmatch(agent)
    assert m and m.group(2) == "evil x=1Injected: y", agent
    assert useragent.user_agent("cni", "();", MASTER).split("; ")[1] == "-"


def test_lease_identity_and_agent_name_the_same_replica(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "kuryr-controller-abc")
    assert identity(4242) == "kuryr-controller-abc_4242"
    assert "(controller; kuryr-controller-abc; pid 4242)" in \
        useragent.user_agent("controller", useragent.replica_name(), MASTER)


def test_keystone_and_neutron_see_the_replica(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "ctl-1")
    keystone = FakeKeystone().start()
    neutron = FakeNeutron(keystone).start()
    try:
        conf = neutron_conf(tmp_path, keystone)
        conf.set_override("role", "controller")
        api = osa.OpenStack.from_conf(conf, master_pid=MASTER)
        made = api.create_port(network_id=neutron.network_id,
                               subnet_id=neutron.subnet["id"], name="p",
                               device_id="uid-1")
        assert api.ports_of("uid-1")
        assert api.delete_port(made.id)
    finally:
        neutron.stop()
        keystone.stop()
    seen = [(m, ua) for _, m, _, ua in keystone.access + neutron.access]
    assert {m for _, m, _, _ in neutron.access} >= {"GET", "POST", "DELETE"}
    assert keystone.access, "no login seen"
    for method, agent in seen:
        m = AGENT.match(agent)
        assert m and m.groups() == ("controller", "ctl-1", "4242"), \
            (method, agent)


def test_the_cni_roles_openstack_checks_name_the_node(
        tmp_path: Path) -> None:
    """Nested deployments check OpenStack from the CNI role too."""
    keystone = FakeKeystone().start()
    try:
        conf = neutron_conf(tmp_path, keystone)
        conf.set_override("role", "cni")
        conf.set_override("node_name", "node-9", "kubernetes")
        osa.OpenStack.from_conf(conf, master_pid=MASTER).token()
    finally:
        keystone.stop()
    assert keystone.access
    for _, _, _, agent in keystone.access:
        m = AGENT.match(agent)
        assert m and m.groups() == ("cni", "node-9", "4242"), agent


def k8s_client(api: FakeAPI, role: str | None) -> k8s.K8sClient:
    conf = cfg.ConfigOpts()
    k8s_conf.register_opts(conf)
    if role:
        conf.register_opt(cfg.StrOpt("role"))
        conf.set_override("role", role)
    conf([], default_config_files=[])
    conf.set_override("api_root", api.url, "kubernetes")
    conf.set_override("node_name", "node-7", "kubernetes")
    return k8s.K8sClient.from_conf(conf, environ={"POD_NAME": "ctl-2"},
                                   master_pid=MASTER)


@pytest.mark.parametrize(("role", "name"), [
    (None, "node-7"), ("cni", "node-7"), ("controller", "ctl-2")])
def test_the_api_server_sees_the_replica(
        role: str | None, name: str) -> None:
    api = FakeAPI().start()
    try:
        client = k8s_client(api, role)
        client.node_pods.list()
        client.close()
    finally:
        api.stop()
    assert api.access
    for _, _, path, agent in api.access:
        m = AGENT.fullmatch(agent)
        assert m and m.groups() == (role or "cni", name, "4242"), (path, agent)
