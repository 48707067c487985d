"""Network health end to end on the real OVN stack: three simulated nodes
(the judge needs a majority), each running our daemon with the OVS
binding, the controller with the port handler, the network judge and the
canaries, against the ML2/OVN Neutron; a router on the pod subnet, so the
canaries' gateway answers.

One stack and one cluster for the whole module. First the canaries come
up (a port per node, plugged, probing its gateway and its peers); then
each fault is injected and undone in turn, and what each says is checked
(the node's readiness, CNI STATUS, the Node conditions and Events in the
fake API), and that all of it clears:

* local, on one node: ovn-controller stopped; its Southbound connection
  cut; br-int's flows deleted; its tunnel endpoint down; its canary's
  port deleted in Neutron (the controller makes another);
* cluster-wide: the Southbound database stopped; Neutron stopped;
* last, the uninstall path: a node, then the controller, stopped
  gracefully, taking their canaries away.

During the Southbound database's outage no node's CNI STATUS fails (each
holds it a moment, then reads the judge's cluster-wide verdict in its
record); CNI STATUS is asked of every node each second through the shim,
as a runtime calls it, and the kubelet's ``Ready`` derived from it as
containerd 2.x and CRI-O do. Last, magnum-auto-healer's NodeCondition
rule replayed on the Node lists taken every second meanwhile (its
durations scaled down to the test's faults), on our conditions and on
that ``Ready``: a local fault gets that node alone repaired, a
cluster-wide fault none. The judge's timings are shortened (faults after
2 s, recoveries after 3 s), the STATUS hold is the default's; the
``health`` benchmark measures the defaults.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kuryr_supervisor.cni.binding import OvsBinding
from kuryr_supervisor.cni.binding.base import CANARY
from kuryr_supervisor.netcheck.codecs import conditions as nc
from tests.fixtures.autohealer import AutoHealer, NodeConditionCheck
from tests.fixtures.daemon import session_pids
from tests.fixtures.ovn import health
from tests.fixtures.ovn.cni import Cluster
from tests.fixtures.ovn.fabric import available
from tests.fixtures.ovn.health import (
    OWN,
    Fault,
    Recorder,
    add_router,
    all_healthy,
    canary,
    conditions,
    describe,
    events,
    excused,
    failing_check,
    ready,
    status,
)
from tests.fixtures.ovn.node import Node
from tests.fixtures.ovn.stack import OvnStack, wait_for
from tests.fixtures.realcloud import RealCloud
from tests.functional.cni_harness import Namespaces

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

JUDGE = {"fault_after": 2.0, "recover_after": 3.0, "cluster_settle": 4.0,
         "correlation": 5.0, "judge_interval": 0.5, "verdict_lifetime": 10,
         "canary_resync_interval": 5.0, "probe_interval": 1.0,
         "canary_peers": 2, "release_on_stop": True}


@pytest.fixture(scope="module")
def stack(real_cloud: RealCloud) -> Iterator[OvnStack]:
    why = available()
    if why:
        pytest.skip(f"OVN data plane unavailable: {why}")
    stack = OvnStack(real_cloud, nodes=3).start()
    try:
        add_router(stack)
        yield stack
    finally:
        stack.close()


@pytest.fixture(scope="module")
def cluster(stack: OvnStack, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    with stack.in_catalog():
        made = health.cluster(
            stack, tmp_path_factory.mktemp("health"), judge=JUDGE,
            node_health={"record_min_interval": 0.5, "probe_timeout": 0.5},
            node_options={"cni_daemon": {"annotation_timeout": 6.0},
                          "cni_install": {"uninstall_on_stop": True}})
        try:
            yield made.start()
        finally:
            made.close()


@pytest.fixture(scope="module")
def recorder(cluster: Cluster) -> Iterator[Recorder]:
    rec = Recorder(cluster)
    yield rec
    rec.stop()


def healthy(cluster: Cluster, stack: OvnStack) -> None:
    wait_for(lambda: all_healthy(cluster, stack), 90,
             lambda: "every node healthy: " + describe(cluster, stack))


def test_every_node_probes_from_a_canary_of_its_own(
        stack: OvnStack, cluster: Cluster, recorder: Recorder) -> None:
    healthy(cluster, stack)
    ports = stack.admin("GET", "/v2.0/ports",
                        device_owner="compute:kuryr-canary").expect(200)["ports"]
    assert sorted(p["binding:host_id"] for p in ports) == sorted(
        n.name for n in stack.fabric.nodes)
    for port in ports:
        assert port["status"] == "ACTIVE"
        assert port["network_id"] == stack.network_id
    for node in stack.fabric.nodes:
        doc = canary(cluster, node)
        assert doc["icmp"] is True and doc["interval"] == 1.0
        for peer in doc["peers"]:
            assert peer["icmp"] and peer["tcp"], doc

        def recorded(node: Node = node) -> dict[str, Any]:
            return dict(cluster.api.nodenetworks[node.name].get("status")
                        or {})
        wait_for(lambda: (recorded().get("gateway") or {}).get("reached")
                 is True, 10, lambda: f"the record: {recorded()}")
        record = recorded()
        assert record["canary"]["portId"] == doc["port"]
        assert [p["reached"] for p in record["peers"]] == [True, True]
        metrics = cluster.daemons[node.name].metrics()
        assert metrics[("kuryr_supervisor_canary_up", ())] == 1.0
        assert metrics[("kuryr_supervisor_canary_peers",
                        (("state", "reached"),))] == 2.0


# -- faults ---------------------------------------------------------------------
#: Seconds a local fault is kept once its condition is set (so the
#: auto-healer's scaled duration is passed).
HOLD = 4.0
#: name -> (epoch start, epoch end, the node it was on or "" cluster-wide)
WINDOWS: dict[str, tuple[float, float, str]] = {}
#: name -> what each signal said, printed for the record
SEEN: dict[str, dict[str, Any]] = {}


def fault_of(stack: OvnStack, name: str, at: int) -> Fault:
    """The fault ``name`` on node number ``at``."""
    return next(f for f in health.local_faults(stack, stack.fabric.nodes[at])
                if f.name == name)


def local_fault(stack: OvnStack, cluster: Cluster, fault: Fault, *,
                reason: str, check: str | None, code: int) -> None:
    """Inject, see the node's signals and its conditions turn, keep it
    :data:`HOLD` s, undo, see all of it clear; the other nodes untouched
    (ready, STATUS success, healthy). ``seen`` records how long the node's
    STATUS took to turn, and everything to clear after the undo."""
    healthy(cluster, stack)
    name, node, undo = fault.name, fault.node, fault.undo
    assert node is not None
    others = [n for n in stack.fabric.nodes if n is not node]
    start = time.time()
    fault.inject()
    try:
        seen: dict[str, Any] = {}
        if check is not None:
            wait_for(lambda: failing_check(cluster, node, check) is not None,
                     30, f"readiness check {check} failing on {node.name}")
            seen["readiness"] = failing_check(cluster, node, check)
        wait_for(lambda: status(cluster, node)[0] == code, 30,
                 lambda: f"STATUS {code} on {node.name}: "
                         f"{status(cluster, node)}")
        seen["status"] = status(cluster, node)
        seen["status_after_s"] = round(time.time() - start, 1)
        wait_for(lambda: conditions(cluster, node) == (
            ("False", reason), ("True", nc.REASON_FAULT)), 40,
            lambda: f"{node.name} marked {reason}: "
                    f"{conditions(cluster, node)}")
        seen["conditions"] = conditions(cluster, node)
        seen["message"] = (cluster.api.condition(node.name, OWN) or {}).get(
            "message")
        if check is None:
            assert ready(cluster, node)[0], ready(cluster, node)
            seen["readiness"] = "ready"
        time.sleep(HOLD)
        for other in others:
            assert conditions(cluster, other)[0] == ("True", OWN)
            assert ready(cluster, other)[0], ready(cluster, other)
            assert status(cluster, other) == (0, ""), other.name
    finally:
        undone = time.time()
        undo()
    healthy(cluster, stack)
    seen["clear_after_s"] = round(time.time() - undone, 1)
    assert conditions(cluster, node)[1] == ("False", nc.REASON_RECOVERED)
    told = events(cluster, start)
    seen["events"] = [(r, n) for r, n, _ in told]
    assert ("NodeNetworkFault", node.name) in seen["events"], told
    assert ("NodeNetworkRecovered", node.name) in seen["events"], told
    assert not any((r == "NodeNetworkFault" and n != node.name) or
                   r == "ClusterNetworkFault"
                   for r, n in seen["events"]), told
    WINDOWS[name] = (start, time.time(), node.name)
    SEEN[name] = seen
    print(f"\n{name}: {seen}")


def test_ovn_controller_stopped(stack: OvnStack, cluster: Cluster,
                                recorder: Recorder) -> None:
    local_fault(stack, cluster, fault_of(stack, "ovn-controller stopped", 0),
                reason="KuryrLocalCheckFailed", check="ovn-controller",
                code=50)
    assert "ovn-controller is not running" in SEEN[
        "ovn-controller stopped"]["readiness"]


def test_southbound_connection_cut(stack: OvnStack, cluster: Cluster,
                                   recorder: Recorder) -> None:
    local_fault(stack, cluster,
                fault_of(stack, "Southbound connection cut", 1),
                reason="KuryrLocalCheckFailed", check="ovn-controller",
                code=50)
    assert "is not connected to the Southbound database" in SEEN[
        "Southbound connection cut"]["readiness"]


def test_br_int_flows_deleted(stack: OvnStack, cluster: Cluster,
                              recorder: Recorder) -> None:
    local_fault(stack, cluster, fault_of(stack, "br-int flows deleted", 2),
                reason="KuryrLocalCheckFailed", check="flows", code=51)
    assert "br-int has no flows for" in SEEN["br-int flows deleted"][
        "readiness"]


def test_tunnel_endpoint_down(stack: OvnStack, cluster: Cluster,
                              recorder: Recorder) -> None:
    """Nothing of the node's own fails: the judge finds it cut off from
    off the node, and tells it in its record; the node's readiness then
    fails naming the judge's reason and the peers, and STATUS answers 51
    (its pods may have lost their network), within 10 s; all clear
    within 45 s of the undo."""
    local_fault(stack, cluster, fault_of(stack, "tunnel endpoint down", 0),
                reason="KuryrPeersUnreachable", check="network-verdict",
                code=51)
    seen = SEEN["tunnel endpoint down"]
    assert "KuryrPeersUnreachable" in seen["readiness"]
    assert "peers that other nodes reach" in seen["readiness"]
    assert "KuryrPeersUnreachable" in seen["status"][1]
    assert seen["status_after_s"] <= 10.0, seen
    assert seen["clear_after_s"] <= 45.0, seen


def test_canary_port_deleted(stack: OvnStack, cluster: Cluster,
                             recorder: Recorder) -> None:
    """The canary's Neutron port deleted: the node says its canary is
    down (not evidence against anyone), the controller makes another,
    the node plugs it; no condition moves, no fault is told."""
    healthy(cluster, stack)
    node = stack.fabric.nodes[1]
    old = canary(cluster, node)["port"]
    start = time.time()
    stack.admin("DELETE", f"/v2.0/ports/{old}").expect(204)
    wait_for(lambda: not canary(cluster, node)["up"], 30,
             f"{node.name}'s canary down")
    down = canary(cluster, node)["state"]
    wait_for(lambda: canary(cluster, node)["up"] and
             canary(cluster, node)["port"] != old, 60,
             lambda: f"{node.name}'s canary up again on a new port: "
                     f"{canary(cluster, node)}")
    healthy(cluster, stack)
    end = time.time()
    for t, nodes in recorder.since(start):
        for obj in nodes:
            conds = {c["type"]: c for c in obj["status"]["conditions"]}
            assert conds[OWN]["status"] == "True", (t, conds[OWN])
    told = [(r, n) for r, n, _ in events(cluster, start)]
    assert not any(r in ("NodeNetworkFault", "ClusterNetworkFault")
                   for r, _ in told), told
    WINDOWS["canary port deleted"] = (start, end, "")
    SEEN["canary port deleted"] = {"canary down": down, "events": told,
                                   "recovered in": round(end - start, 1)}
    print(f"\ncanary port deleted: {SEEN['canary port deleted']}")


def cluster_fault(name: str, stack: OvnStack, cluster: Cluster,
                  recorder: Recorder, *, during: Callable[[float], bool],
                  what: str, inside: Callable[[], None] = lambda: None
                  ) -> dict[str, Any]:
    """Inject, wait for ``during`` (given the fault's start: the fault
    seen where it shows), run ``inside``, keep it, undo; no Node
    condition ever moves."""
    [fault] = [f for f in health.cluster_faults(stack) if f.name == name]
    healthy(cluster, stack)
    start = time.time()
    undo = fault.undo
    fault.inject()
    seen: dict[str, Any] = {}
    try:
        wait_for(lambda: during(start), 60, what)
        inside()
        time.sleep(HOLD + 4)
        seen["readiness"] = {n.name: ready(cluster, n)[0]
                             for n in stack.fabric.nodes}
        seen["status"] = {n.name: status(cluster, n)
                          for n in stack.fabric.nodes}
    finally:
        undo()
    healthy(cluster, stack)
    end = time.time()
    for t, nodes in recorder.since(start):
        for obj in nodes:
            conds = {c["type"]: c for c in obj["status"]["conditions"]}
            assert conds[OWN]["status"] == "True", (t, conds[OWN])
    seen["events"] = [(r, n) for r, n, _ in events(cluster, start)]
    assert not any(r == "NodeNetworkFault" for r, _ in seen["events"]), seen
    seen["STATUS failing"] = recorder.failing(start, end)
    WINDOWS[name] = (start, end, "")
    SEEN[name] = seen
    return seen


def controller_metric(cluster: Cluster, name: str) -> str:
    assert cluster.controller is not None
    body = cluster.controller.get("/metrics")[1]
    return "\n".join(line for line in body.splitlines()
                     if line.startswith(f"kuryr_supervisor_{name}"))


def test_southbound_database_stopped(stack: OvnStack, cluster: Cluster,
                                     recorder: Recorder) -> None:
    """Every node's ovn-controller loses the database at once. Each node
    holds its STATUS (a shared cause), the judge declares a cluster-wide
    fault and writes it into every record, each node reads it there: CNI
    STATUS never fails (sampled each second through the shim, as a
    runtime on libcni 1.2 calls it, which would turn every Node's Ready
    False), while readiness names the cause and an ADD fails with code 11
    naming it; no condition moves."""
    nodes = stack.fabric.nodes
    #: node -> excuse -> seconds from the fault to the first sight of it
    learned: dict[str, dict[str, float]] = {n.name: {} for n in nodes}
    told_at: list[float] = []

    def told(start: float) -> bool:
        at = round(time.time() - start, 2)
        for node in nodes:
            why = excused(cluster, node)
            if why is not None:
                learned[node.name].setdefault(why, at)
        if not told_at and any(r == "ClusterNetworkFault" for r, _, _ in
                               events(cluster, start)):
            told_at.append(at)
        return bool(told_at) and all(
            "cluster-wide" in learned[n.name] for n in nodes) and \
            'network_cluster_fault{kind="ovn-controller"} 1.0' in \
            controller_metric(cluster, "network_cluster_fault")

    added: dict[str, Any] = {}

    def add_a_pod() -> None:
        """An ADD meanwhile (the nodes' annotation_timeout: 6 s)."""
        namespaces = Namespaces()
        added["readiness"] = {n.name: failing_check(cluster, n,
                                                    "ovn-controller")
                              for n in nodes}
        node, name = nodes[0], f"sb-{uuid.uuid4().hex[:6]}"
        cluster.pods[name] = (cluster.api.add_pod("default", name, node.name),
                              node, namespaces.create())
        try:
            added["code"], added["out"] = cluster.cni("ADD", name)
        finally:
            cluster.cni("DEL", name)
            cluster.api.delete_pod("default", name)
            namespaces.cleanup()

    start = time.time()
    seen = cluster_fault("Southbound database stopped", stack, cluster,
                         recorder, during=told, inside=add_a_pod,
                         what="the cluster-wide fault told and learned by "
                              "every node")
    assert not any(seen["readiness"].values()), seen
    for line in added["readiness"].values():
        assert "is not connected to the Southbound database" in line, added
    assert all(code == 0 for code, _ in seen["status"].values()), seen
    assert seen["STATUS failing"] == [], seen["STATUS failing"]
    assert added["code"] != 0 and added["out"]["code"] == 11, added
    assert "not connected to the Southbound database" in \
        added["out"]["msg"], added
    assert all(learned[n.name]["cluster-wide"] < 5.0 for n in nodes), learned
    wait_for(lambda: ("ClusterNetworkRecovered", "kube-system") in [
        (r, n) for r, n, _ in events(cluster, start)], 30,
        "ClusterNetworkRecovered told")
    assert 'network_cluster_fault{kind="ovn-controller"} 0.0' in \
        controller_metric(cluster, "network_cluster_fault")
    for node in nodes:
        obj = cluster.api.nodenetworks[node.name]
        assert obj["spec"]["cluster"] == {}, obj["spec"]
    [message] = [m for r, _, m in events(cluster, start)
                 if r == "ClusterNetworkFault"]
    # Told when more than half were in trouble (the third may follow).
    assert message.split(" of 3 nodes report network trouble at once")[0] \
        in ("2", "3"), message
    assert "ovn-controller's connection to the OVN Southbound" in message
    seen["learned"], seen["told"] = learned, told_at[0]
    print(f"\nSouthbound database stopped: {seen}; {message}; an ADD: "
          f"{added}")


def test_neutron_stopped(stack: OvnStack, cluster: Cluster,
                         recorder: Recorder) -> None:
    """Neutron is not on the data path: the nodes stay ready and healthy;
    the controller is not ready, naming it."""
    assert stack.neutron is not None and cluster.controller is not None
    controller = cluster.controller

    def named(start: float) -> bool:
        code, body = controller.get("/ready?verbose")
        return code != 200 and "[-]neutron failed" in body
    seen = cluster_fault("Neutron stopped", stack, cluster, recorder,
                         during=named, what="the controller not ready "
                                            "naming Neutron")
    assert all(seen["readiness"].values()), seen
    assert all(code == 0 for code, _ in seen["status"].values()), seen
    assert seen["STATUS failing"] == [], seen
    assert not any(r == "ClusterNetworkFault" for r, _ in seen["events"]), seen
    wait_for(lambda: controller.probe("/ready") == 200, 60,
             "the controller ready again")
    print(f"\nNeutron stopped: {seen}")


#: The local faults that fail the node's CNI STATUS (the tunnel endpoint
#: down too, once the judge tells the node: its pods are cut off).
STATUS_FAULTS = ("ovn-controller stopped", "Southbound connection cut",
                 "br-int flows deleted", "tunnel endpoint down")


def test_a_cluster_wide_verdict_lapses_with_the_controller_gone(
        stack: OvnStack, cluster: Cluster, recorder: Recorder) -> None:
    """The Southbound database stopped, every node told it is
    cluster-wide; then the controller is killed (a crash loop, a scale to
    zero): its verdict is no longer renewed, and every node's CNI STATUS
    fails for the fault again within the verdict's lifetime (10 s here)
    plus 5 s, as a node without a judge does. Once a controller judges
    again, the nodes hear it again."""
    nodes = stack.fabric.nodes
    controller = cluster.controller
    assert controller is not None
    [fault] = [f for f in health.cluster_faults(stack)
               if f.name == "Southbound database stopped"]
    healthy(cluster, stack)
    fault.inject()
    try:
        wait_for(lambda: all(excused(cluster, n) == "cluster-wide"
                             for n in nodes), 60,
                 lambda: "every node told of the cluster-wide fault: " +
                 str({n.name: excused(cluster, n) for n in nodes}))
        for pid in session_pids(controller.pid):
            os.kill(pid, signal.SIGKILL)
        killed = time.time()
        controller.wait_exit(10)
        failed: dict[str, float] = {}

        def all_failing() -> bool:
            for node in nodes:
                if node.name not in failed and status(cluster, node)[0] == 50:
                    failed[node.name] = round(time.time() - killed, 1)
            return len(failed) == len(nodes)
        wait_for(all_failing, JUDGE["verdict_lifetime"] + 20,
                 lambda: f"STATUS failing on every node: {failed}")
        print(f"\nthe controller gone: STATUS failed after {failed}")
        assert max(failed.values()) <= JUDGE["verdict_lifetime"] + 5, failed
        for node in nodes:
            assert "ovn-controller" in status(cluster, node)[1]
        controller.start()
        controller.wait_ready(60)
        wait_for(lambda: all(status(cluster, n)[0] == 0 for n in nodes), 30,
                 "the cluster-wide fault told again by the new controller")
    finally:
        fault.undo()
        if controller.proc is not None and controller.proc.poll() is not None:
            controller.start()
            controller.wait_ready(60)
    healthy(cluster, stack)


def test_the_auto_healer_repairs_a_local_fault_alone(
        recorder: Recorder) -> None:
    """magnum-auto-healer's NodeCondition rule (our type; NetworkUnavailable
    with error-values True; and its default, ``Ready``, as the kubelet
    derives it from CNI STATUS on containerd 2.x and CRI-O), its
    unhealthy-duration and monitor interval scaled down to the faults here
    (3 s, 1 s; no delay after a node is added), on the Node lists taken
    meanwhile: a local fault gets its node alone repaired, a cluster-wide
    fault none, even by a healer watching ``Ready``."""
    def healer(check: NodeConditionCheck) -> AutoHealer:
        return AutoHealer([check], monitor_interval=1,
                          check_delay_after_add=0)
    ours = (healer(NodeConditionCheck(types=(OWN,), unhealthy_duration=3)),
            healer(NodeConditionCheck(types=(nc.NETWORK_UNAVAILABLE,),
                                      error_values=("True",),
                                      unhealthy_duration=3)))
    on_ready = healer(NodeConditionCheck(unhealthy_duration=3))
    assert on_ready.checks[0].types == ("Ready",)     # the rule's default
    assert WINDOWS, "no fault ran"
    assert "Southbound database stopped" in WINDOWS
    for name, (start, end, node) in WINDOWS.items():
        timeline = [(t, n) for t, n in recorder.timeline if start <= t <= end]
        for each in ours:
            repaired = each.replay(timeline)
            assert set(repaired) == ({node} if node else set()), \
                (name, repaired)
        repaired = on_ready.replay(timeline)
        assert set(repaired) == ({node} if name in STATUS_FAULTS else
                                 set()), (name, "Ready", repaired)


def canary_plugged(node: Node) -> bool:
    """The canary's port on ``node``'s br-int, or its veth on the node."""
    host = OvsBinding.host_ifname(*CANARY)
    links = subprocess.run(["ip", "-n", node.netns, "-o", "link", "show"],
                           capture_output=True, text=True, check=True).stdout
    return host in node.vsctl("list-ports", "br-int").split() or \
        f" {host}@" in links or f" {host}:" in links


def test_uninstalling_takes_the_canaries_away(
        stack: OvnStack, cluster: Cluster) -> None:
    """The uninstall path, last (it stops the daemons and the controller):
    a node stopped gracefully with ``[cni_install] uninstall_on_stop``
    unplugs its canary (its port off br-int, its veth gone with its
    namespace) and deletes its record; the controller stopped gracefully
    with ``[network_health] release_on_stop`` deletes every canary port in
    Neutron and takes its parts out of the records, and the nodes still
    running unplug theirs."""
    healthy(cluster, stack)
    nodes = stack.fabric.nodes
    assert all(canary_plugged(n) for n in nodes)
    gone = nodes[2]
    daemon = cluster.daemons[gone.name]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(30) == 0, daemon.log()
    assert not canary_plugged(gone)
    assert gone.name not in cluster.api.nodenetworks
    assert cluster.controller is not None
    cluster.controller.signal(signal.SIGTERM)
    assert cluster.controller.wait_exit(30) == 0, cluster.controller.log()
    assert stack.admin("GET", "/v2.0/ports", device_owner=(
        "compute:kuryr-canary")).expect(200)["ports"] == []
    for node in nodes[:2]:
        spec = cluster.api.nodenetworks[node.name]["spec"]
        assert spec == {"nodeName": node.name}, spec
        wait_for(lambda node=node: not canary_plugged(node), 30,
                 f"{node.name}'s canary unplugged")
        assert conditions(cluster, node)[0] == (None, None)
