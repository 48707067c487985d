"""The port pools' pure parts: which nodes get a pool (:mod:`poolnodes`,
on a clock of the test's), the pool key per node, and the figures' rows
(one per pool, a ``node`` label, folded past the board's size)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.openstack.making import PortMaker
from kuryr_supervisor.controller.openstack.neutron import NeutronApi
from kuryr_supervisor.controller.pools import poolports
from kuryr_supervisor.controller.pools.nodes import PoolNodes
from kuryr_supervisor.controller.pools.portpools import PortPools
from kuryr_supervisor.controller.pools.records import PoolKey
from kuryr_supervisor.health.metrics import _pools
from kuryr_supervisor.state import poolstats
from kuryr_supervisor.state.poolstats import PoolBoard


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_node_has_a_pool_while_it_runs_pods_and_idle_seconds_after() -> None:
    clock = Clock()
    nodes = PoolNodes(clock)
    assert nodes.place("u1", "a") is True           # first demand
    assert nodes.place("u2", "a") is False
    assert nodes.place("u3", "b") is True
    assert nodes.place("u1", "a") is False          # an update: same node
    assert nodes.wanted(60) == ["a", "b"]
    nodes.leave("u3")                               # b: no pod from now
    clock.now += 59
    assert nodes.wanted(60) == ["a", "b"]
    clock.now += 2
    assert nodes.wanted(60) == ["a"]                 # b idle: pool goes
    assert nodes.place("u4", "b") is True            # b's pool again
    nodes.leave("u4")
    clock.now += 1000
    assert nodes.wanted(0) == ["a", "b"]             # 0: kept forever
    nodes.leave("unknown")                           # harmless


def test_a_list_replaces_every_pod_and_starts_the_wait_of_emptied_nodes(
        ) -> None:
    clock = Clock()
    nodes = PoolNodes(clock)
    nodes.replace([("u1", "a"), ("u2", "b"), ("u3", "")])
    assert nodes.wanted(10) == ["a", "b"]
    clock.now += 5
    nodes.replace([("u1", "a"), ("u9", "c")])        # b's pods gone
    clock.now += 6
    assert nodes.wanted(10) == ["a", "b", "c"]       # b waits since +5
    clock.now += 5
    assert nodes.wanted(10) == ["a", "c"]
    nodes.heard_of("d")                              # a restart's pool port
    nodes.heard_of("a")                              # has pods: no wait
    clock.now += 9
    assert nodes.wanted(10) == ["a", "c", "d"]
    clock.now += 2
    assert nodes.wanted(10) == ["a", "c"]


def test_a_pod_moving_node_moves_its_count() -> None:
    nodes = PoolNodes(Clock())
    nodes.place("u1", "a")
    nodes.place("u1", "b")
    assert nodes.wanted(1) == ["a", "b"]             # a: just left
    nodes.place("u1", "")                            # no node: ignored
    assert nodes.wanted(1) == ["a", "b"]


def pools(tmp_path: Path, guarded: bool = False) -> PortPools:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    (tmp_path / "c.conf").write_text(
        "[controller]\npod_network_id = net\npod_subnet_id = sub\n"
        "project_id = proj\n[vif_pool]\nenabled = true\n"
        "ports_pool_node_idle = 30\n")
    conf(["--config-file", str(tmp_path / "c.conf")], default_config_files=[])
    # No claim is made here: a maker over an adapter that reaches nothing.
    maker = PortMaker(NeutronApi(None, 1.0),  # type: ignore[arg-type]
                      network_id="net", subnet_id="sub")
    return PortPools(conf, PoolBoard(), maker=maker, guarded=guarded)


def test_the_key_names_the_node_and_binding_refused_keeps_it(
        tmp_path: Path) -> None:
    p = pools(tmp_path)
    assert p.key == PoolKey("net", "sub", "proj")
    assert p.key_for("n1") == PoolKey("net", "sub", "proj", node="n1")
    assert p.key_for("n1").label == "net/sub/proj@n1"
    assert p.key_for("") == p.key
    p.placed("u1", "n1")
    p.placed("u2", "n2")
    assert p.wanted() == [p.key_for("n1"), p.key_for("n2")]
    p.pools[p.key_for("n1")] = p.of("n1")
    p.pools[p.key_for("n1")].hits = 3
    p.unbind("403")
    assert p.bind is False
    # The unbound pool is refilled; a node's bound ports stay its own.
    assert p.refilled() == [p.key]
    assert p.wanted() == [p.key_for("n1"), p.key_for("n2")]
    assert sorted(p.pools, key=lambda k: k.node) == [p.key, p.key_for("n1")]
    assert p.of("n1").hits == 3
    p.unbind("again")                               # once


def test_board_rows_carry_the_node_and_fold_past_their_number() -> None:
    board = PoolBoard()
    rows = [(f"net/sub/proj@node-{i:04d}", {"free": 1.0, "hits": 2.0})
            for i in range(poolstats.MAX_POOLS + 10)]
    board.publish_all(rows)
    got = board.rows()
    assert len(got) == poolstats.MAX_POOLS
    assert got[0]["pool"] == "net/sub/proj" and got[0]["node"] == "node-0000"
    assert got[-1]["node"] == "other"
    assert (got[-1]["free"], got[-1]["hits"]) == (11, 22)   # 11 folded
    board.publish_all(rows[:2] + [("net/sub/proj", {"free": 4.0})])
    got = board.rows()
    assert [r["node"] for r in got] == ["node-0000", "node-0001", ""]
    families = {f.name: f for f in _pools(got)}
    free = families["kuryr_supervisor_port_pool_free_ports"]
    assert [s.labels for s in free.samples][1:] == [
        {"pool": "net/sub/proj", "node": "node-0001"},
        {"pool": "net/sub/proj", "node": ""}]


@dataclasses.dataclass
class _Pod:
    node: str
    namespace: str = "ns"
    name: str = "p"
    finished: bool = False


def _pool_port(pid: str, node: str, closed: bool) -> osa.Port:
    return osa.Port(pid, "fa:16:3e:00:00:01", poolports.POOL_DEVICE, None,
                    "sub", "", host=node, name=wire.port_name(
                        "", poolports.CLOSED_NAME if closed
                        else poolports.POOL_NAME))


def test_a_node_that_runs_selected_pods_keeps_a_closed_pool(
        tmp_path: Path) -> None:
    """A closed pool (ports in no group) per node that runs a pod a
    NetworkPolicy selects: a selected pod takes one of its ports, claimed
    in the background with its groups; its node's closed pool empty, a
    port in the default group the caller claims; never a closed port
    for a pod no policy selects."""
    p, clock = pools(tmp_path, guarded=True), Clock()
    p.nodes, p.closed = PoolNodes(clock), PoolNodes(clock)
    try:
        p.listed([("u1", "n1"), ("u2", "n1"), ("u3", "n2")], {"u2"})
        closed_n1 = p.key_for("n1", closed=True)
        assert closed_n1.label == "net/sub/proj/closed@n1"
        assert p.wanted() == [p.key_for("n1"), p.key_for("n2"), closed_n1]
        # Ports listed: each into its pool by its name.
        assert p.keep([_pool_port("c1", "n1", True),
                       _pool_port("d1", "n1", False)]) == 2
        assert list(p.of("n1", closed=True).free) == ["c1"]
        assert list(p.of("n1").free) == ["d1"]
        pods = {u: _Pod("n1") for u in ("u4", "u5", "u6")}
        served = p.serve(["u4", "u5", "u6"], pods,
                         groups={"u4": ("sg",), "u5": ("sg",)})
        assert [(u, port.id) for u, port in served.taken] == [
            ("u4", "c1"), ("u5", "d1")]
        assert served.own == {"u5"} and served.rest == ["u6"]
        assert p.claims.owner("c1") == "u4"         # in the background
        assert p.claims.owner("d1") == ""           # the caller's
        assert (p.of("n1", closed=True).hits,
                p.of("n1", closed=True).misses) == (1, 1)
        # A starving pod no policy selects never gets a closed port.
        p.keep([_pool_port("c2", "n2", True)])
        assert p.take_fullest("n1") is None
        taken = p.take_fullest("n1", closed=True)
        assert taken is not None and taken.id == "c2"
        # No selected pod listed any more: kept the idle time, then not.
        p.listed([("u1", "n1")], set())
        assert closed_n1 in p.wanted()
        clock.now += 31
        assert p.wanted() == [p.key_for("n1")]
    finally:
        p.stop()


def test_without_the_policy_handler_a_closed_port_found_is_given_back(
        tmp_path: Path) -> None:
    """Closed ports a restart finds (the network_policy handler since
    taken out of the handlers) are not kept: given back at once."""
    p = pools(tmp_path)
    p.listed([("u1", "n1")], {"u1"})
    assert p.keep([_pool_port("c1", "n1", True),
                   _pool_port("d1", "n1", False)]) == 2
    assert p.wanted() == [p.key_for("n1")]
    extra = p.extra()
    assert [(key, [port.id for port in ports]) for key, ports in extra] == [
        (p.key_for("n1", closed=True), ["c1"])]
    assert list(p.of("n1").free) == ["d1"]
