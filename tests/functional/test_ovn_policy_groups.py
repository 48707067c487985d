"""NetworkPolicy's model on the real OVN data plane: a security group
whose rules name an address group admits its members and no one else,
and a pod joins the set in one call, the rules untouched.

The stack (tests/fixtures/ovn/): OVN central and two nodes, a Neutron of
the real cloud with ML2/OVN. Three pods plugged by hand (a server on one
node, two clients on the other) answer and send real TCP and UDP; the
server's port is given, through the controller's OpenStack adapter, one
group admitting TCP and UDP from one address group only. ML2/OVN turns
the address group into an OVN Address_Set (read in the NB), which the
group's ACLs match on.
"""
from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.sgwire import RuleSpec
from tests.fixtures.ovn import svcpods
from tests.fixtures.ovn.fabric import Pod
from tests.fixtures.ovn.node import Node
from tests.fixtures.ovn.stack import OvnStack, wait_for

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

TCP, UDP = 8080, 5353


class World:
    """The adapter on the OVN Neutron, pods, and cleanup."""

    def __init__(self, tmp_path: Path, stack: OvnStack) -> None:
        self.stack = stack
        opts = dict(stack.cloud.conf_overrides(), endpoint_override=stack.url)
        path = tmp_path / "controller.conf"
        path.write_text("[neutron]\n" + "".join(f"{k} = {v}\n"
                                                for k, v in opts.items()))
        conf = cfg.ConfigOpts()
        conf_mod.register_opts(conf)
        conf(["--config-file", str(path)], default_config_files=[])
        self.api = osa.OpenStack.from_conf(conf)
        self.tag = osa.cluster_tag(f"policy-{uuid.uuid4().hex[:10]}")
        self.pods: list[tuple[Pod, subprocess.Popen[str] | None]] = []

    def pod(self, node: Node, name: str = "") -> Pod:
        """A pod on ``node`` (in the project's default group); with a
        ``name``, answering TCP and UDP with it."""
        stack = self.stack
        port = stack.create_port(f"np-{uuid.uuid4().hex[:8]}", node.name)
        [fixed] = port["fixed_ips"]
        pod = stack.fabric.plug(
            node, port["id"], port["mac_address"],
            f"{fixed['ip_address']}/{stack.cidr.split('/')[1]}", stack.mtu,
            gateway=stack.gateway)
        server = None
        if name:
            server = subprocess.Popen(
                ["ip", "netns", "exec", pod.netns, "/usr/bin/python3", "-c",
                 svcpods._SERVER, name, str(TCP), str(UDP)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.pods.append((pod, server))
        if server is not None:
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "listening"
        stack.wait_port(port["id"], "ACTIVE")
        return pod

    def close(self) -> None:
        stack = self.stack
        for pod, server in self.pods:
            if server is not None:
                server.kill()
                server.wait()
            stack.fabric.remove(pod)
            stack.admin("DELETE", f"/v2.0/ports/{pod.port_id}").expect(204, 404)
        for sg in self.api.policy_groups(self.tag):
            self.api.delete_policy_group(sg.id)
        for ag in self.api.address_groups(self.tag):
            self.api.delete_address_group(ag.id)


@pytest.fixture
def world(tmp_path: Path, ovn_stack: OvnStack) -> Iterator[World]:
    made = World(tmp_path, ovn_stack)
    yield made
    made.close()


def answers(client: Pod, server: Pod, proto: str) -> bool:
    """Whether one of a few probes from ``client`` is answered by
    ``server`` (each a new connection, or a datagram from a new port)."""
    port = TCP if proto == "tcp" else UDP
    return "server" in svcpods.probe(client, proto, server.address, port, 1,
                                     1.5)


def settles(client: Pod, server: Pod, admitted: bool, what: str) -> None:
    """TCP and UDP from ``client`` to ``server`` come to be ``admitted``
    (OVN applies a change within seconds), then stay so."""
    for proto in ("tcp", "udp"):
        wait_for(lambda p=proto: answers(client, server, p) == admitted, 30,
                 f"{what} ({proto})")
        assert all(answers(client, server, proto) == admitted
                   for _ in range(3)), f"{what} ({proto}): not steady"


def test_address_group_admits_its_members(world: World) -> None:
    api, tag, stack = world.api, world.tag, world.stack
    assert api.extension("address-group")
    assert api.extension("security-groups-remote-address-group")
    node1, node2 = stack.fabric.nodes
    server = world.pod(node2, "server")
    member, other = world.pod(node1), world.pod(node1)
    # The path works: in the project's default group, both reach it.
    settles(member, server, True, "the member reaches the server (default)")
    settles(other, server, True, "the other reaches the server (default)")

    peers = api.create_address_group("peers", tag, [member.address])
    group = api.create_policy_group("np", tag)
    api.create_rules(group.id, [
        RuleSpec("ingress", protocol="tcp", port_min=TCP, port_max=TCP,
                 remote_address_group_id=peers.id),
        RuleSpec("ingress", protocol="udp", port_min=UDP, port_max=UDP,
                 remote_address_group_id=peers.id)])
    nb = stack.fabric.central
    name = f"ag_{peers.id.replace('-', '_')}_ip4"

    def address_set() -> list[str]:
        return sorted(nb.nbctl("--bare", "--columns=addresses", "find",
                               "Address_Set", f"name={name}").split())
    assert address_set() == [f"{member.address}/32"]
    assert api.set_port_security_groups(server.port_id, [group.id]) == (
        group.id,)
    settles(other, server, False, "the non-member is refused")
    settles(member, server, True, "the member is admitted")

    # One call, the rules untouched: the other pod joins the set.
    rules = api.policy_group(group.id)
    api.add_addresses(peers.id, [other.address])
    assert address_set() == sorted(f"{p.address}/32" for p in (member, other))
    settles(other, server, True, "the new member is admitted")
    api.remove_addresses(peers.id, [member.address])
    settles(member, server, False, "the member that left is refused")
    settles(other, server, True, "the member that stays is admitted")
    assert api.policy_group(group.id) == rules
