"""NetworkPolicy end to end on the real OVN stack, judged packet by packet
against the reference evaluator (tests/fixtures/netpol/reference.py).

Two OVN nodes, the ML2/OVN Neutron (address groups enabled), the
controller daemon with the ``neutron_port`` and ``network_policy``
handlers against the fake Kubernetes API. Nine pods in three namespaces,
on both nodes, made as a cluster makes them (their ports by the port
handler), each answering TCP and UDP on a few ports. The cases
(tests/fixtures/netpol/e2ecases.py, after the upstream NetworkPolicy e2e
classes) change the API one after another; after each, the test waits
for the handler to say every policy applied (its writes done and
settled, ``/status``) and for OVN to have the change on every chassis
(``ovn-nbctl --wait=hv sync``), then every pod probes every other on
every probed port (TCP connect, UDP request and answer; a refusal is a
timeout), and each answer is compared with what the reference evaluator
says of the same objects. 100 % agreement, a table printed.

Debian 12's Open vSwitch 3.1 userspace datapath may abort in its
conntrack (an assertion in ``conn_update_state``) under the probes'
bursts; the node's ovs-vswitchd is then started again, as ``ovs-ctl
--monitor`` does on a real node (tests/fixtures/ovs). A case during
whose probes a node's datapath died is probed again once OVN has its
flows back on every chassis: its answers are not the policy's. At most
:data:`CRASHES` such aborts are taken (each printed); one more fails the
test as an Open vSwitch fault.

The project's default security group is as Neutron made it: the pods a
policy selects leave it and still reach the pods none selects through
the handler's own rule in it (its ``selected`` marker group), nothing
added by hand. Every pod, namespace, port and process goes after.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.clouds import controller_options
from tests.fixtures.daemon import Daemon
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.netpol import e2ecases, reference
from tests.fixtures.netpol.ovnpods import (
    PolicyPods,
    datapath_faults,
    set_quotas,
    settle,
    writes_by_kind,
)
from tests.fixtures.ovn.stack import OvnStack, wait_for

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

#: The handlers the controller runs (a test of the test runs it without
#: ``network_policy``: the deny cases then disagree).
HANDLERS = "neutron_port,network_policy"
QUOTAS = {"security_group": 100, "security_group_rule": 2000}
#: Open vSwitch aborts a run may meet and probe again after (see above).
CRASHES = 6


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def expected(api: FakeAPI, probes: list[tuple[Any, ...]]) -> list[bool]:
    with api.cond:
        policies = list(api.networkpolicies.values())
        pods = list(api.pods.values())
        namespaces = list(api.namespace_objects.values())
    return [reference.allowed(policies, pods, namespaces,
                              api.pods[src], dst, port, proto)
            for src, dst, port, proto in probes]


def ours(stack: OvnStack, tag: str) -> list[str]:
    """The names of the cluster's security and address groups."""
    groups = stack.admin("GET", "/v2.0/security-groups", tags=tag).expect(
        200)["security_groups"]
    ags = stack.admin("GET", "/v2.0/address-groups", description=tag).expect(
        200)["address_groups"]
    return sorted(g["name"] for g in [*groups, *ags])


class Cluster:
    """The controller, the cluster's namespaces and pods, and what the
    test changed in Neutron, all undone by :meth:`close` (each step even
    when one before it failed)."""

    def __init__(self, tmp_path: Path, api: FakeAPI, stack: OvnStack) -> None:
        self.api, self.stack = api, stack
        self.undo = contextlib.ExitStack()
        self.d = Daemon(tmp_path, controller_options(
            stack.cloud, api.url,
            neutron=dict(stack.cloud.conf_overrides(),
                         endpoint_override=stack.url),
            controller={"handlers": HANDLERS,
                        "pod_network_id": stack.network_id,
                        "pod_subnet_id": stack.subnet_id},
            network_policy={"resync_interval": 30.0, "retry_max": 2.0}))
        self.pods = PolicyPods(stack, api, self.d.log)
        self.uids: set[str] = set()

    def start(self) -> None:
        stack, api, undo = self.stack, self.api, self.undo
        undo.callback(set_quotas, stack, set_quotas(stack, QUOTAS))
        for ns, labels in e2ecases.NAMESPACES.items():
            api.add_namespace(ns, labels)
        undo.callback(self._ports_gone)
        self.d.start()
        undo.callback(self.d.close)
        undo.callback(self._policies_gone)
        undo.callback(self._pods_gone)
        undo.callback(self.pods.close)
        self.d.wait_ready(90)
        nodes = stack.fabric.nodes
        for i, (ns, name) in enumerate(
                (ns, name) for ns in e2ecases.NAMESPACES
                for name in e2ecases.PODS):
            labels, ports = e2ecases.PODS[name]
            self.pods.make(ns, name, nodes[i % len(nodes)], labels, ports)
        stack.fabric.central.nbctl("--wait=hv", "sync")

    def _pods_gone(self) -> None:
        with self.api.cond:
            self.uids |= {p["metadata"]["uid"] for p in self.api.pods.values()}
            for key in list(self.api.pods):
                self.api.delete_pod(*key)
        wait_for(lambda: not self.api.podports, 60, "the pods' PodPorts gone")

    def _policies_gone(self) -> None:
        """Every policy deleted and the handler's groups with them (a
        test that failed midway left some), before the quotas go back."""
        with self.api.cond:
            for key in list(self.api.networkpolicies):
                self.api.delete_networkpolicy(*key)
        tag = f"kuryr-supervisor:{self.api.namespaces['kube-system']}"
        wait_for(lambda: ours(self.stack, tag) == [], 60,
                 lambda: f"the policies' groups gone: {ours(self.stack, tag)}")

    def _ports_gone(self) -> None:
        """What the port handler could not delete."""
        for port in self.stack.admin("GET", "/v2.0/ports").expect(200)[
                "ports"]:
            if port["device_id"] in self.uids:
                self.stack.admin("DELETE", f"/v2.0/ports/{port['id']}"
                                 ).expect(204, 404)

    def close(self) -> None:
        self.undo.close()


@pytest.fixture
def cluster(tmp_path: Path, api: FakeAPI,
            ovn_stack: OvnStack) -> Iterator[Cluster]:
    made = Cluster(tmp_path, api, ovn_stack)
    try:
        made.start()
        yield made
    finally:
        made.close()


def test_policies_agree_with_the_reference(cluster: Cluster) -> None:
    stack, api, d, pods = cluster.stack, cluster.api, cluster.d, cluster.pods
    probes = [(src, dst.address, port, proto)
              for src in pods.pods for key, dst in pods.pods.items()
              if key != src for port, proto in e2ecases.PROBED]
    names = {pod.address: "/".join(key) for key, pod in pods.pods.items()}
    rows, wrong = [], []
    crashes: list[str] = []
    for case in e2ecases.CASES:
        before = sum(writes_by_kind(d).values())
        case.change(api, stack.cidr)
        took = settle(d, stack, api, case.name,
                      before=before if case.writes else None)
        t1 = time.monotonic()
        got = pods.probe(probes)
        faults = datapath_faults(stack)
        while len(faults) > len(crashes) and len(faults) <= CRASHES:
            crashes[:] = faults     # its answers are not the policy's
            stack.fabric.central.nbctl("--wait=hv", "sync")
            time.sleep(1)
            got = pods.probe(probes)
            faults = datapath_faults(stack)
        assert len(faults) == len(crashes), f"{case.name}: a node's " \
            f"ovs-vswitchd died (an Open vSwitch fault, not a policy's): " \
            f"{faults}"
        want = expected(api, probes)
        bad = [(p, g) for p, g, w in zip(probes, got, want, strict=True)
               if g != w]
        if bad:     # said of each: whether it persists
            time.sleep(3)
            again = pods.probe([p for p, _ in bad])
            wrong += [(case.name, *p, g, a)
                      for (p, g), a in zip(bad, again, strict=True)]
        rows.append((case.name, len(probes), len(probes) - len(bad),
                     sum(want), took, time.monotonic() - t1))
    print(f"\n{'case':40} {'probes':>6} {'agreed':>6} {'allowed':>7} "
          f"{'settle s':>8} {'probe s':>7}")
    for name, n, ok, allowed, took, probing in rows:
        print(f"{name:40} {n:6d} {ok:6d} {allowed:7d} {took:8.1f} "
              f"{probing:7.1f}")
    total = sum(r[1] for r in rows)
    print(f"{'total':40} {total:6d} {sum(r[2] for r in rows):6d}")
    for line in crashes:
        print(f"probed again after an Open vSwitch abort: {line}")
    assert len(rows) >= 15 and total >= 300
    assert not wrong, "\n".join(
        f"{c}: {s[0]}/{s[1]} -> {names[dst]} ({dst}) {port}/{proto} "
        f"answered={g} (3 s later: {a})"
        for c, s, dst, port, proto, g, a in wrong[:40])
    tag = f"kuryr-supervisor:{api.namespaces['kube-system']}"
    wait_for(lambda: ours(stack, tag) == [], 30,
             lambda: f"the policies' groups gone: {ours(stack, tag)}")
    text = d.log()
    assert "Traceback" not in text and " ERROR " not in text
