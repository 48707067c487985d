"""Benchmark ``ovs-binding`` — what the OVS binding costs a pod's ADD and
DEL, against the Linux bridge binding measured in the same run.

100 pods, one at a time, in-process (no shim, no daemon: the binding alone,
as the Server calls it): ``plumb`` then ``unplumb`` through
:class:`~kuryr_supervisor.cni.binding.OvsBinding` on a private Open vSwitch
(userspace datapath, ``tests/fixtures/ovs``) and through
:class:`~kuryr_supervisor.cni.binding.BridgeBinding` on a fresh Linux
bridge, interleaved pod by pod with the order alternating. The OVS
figures include its OVSDB transactions (one per ADD and DEL, on the held
connection of :mod:`kuryr_supervisor.cni.ovsdb`; the bridge's datapath
type comes from its monitor) and the ethtool ioctl that switches transmit
checksum offload off on a netdev datapath.

Goal: ADD and DEL each at most 1.2 times the Linux bridge binding's
(median), as the binding's cost must not be what a pod waits for.
"""
from __future__ import annotations

import ipaddress
import secrets
import time
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.harness import ip
from benchmarks.stats import Figure, summarize
from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.cni.binding import BridgeBinding, OvsBinding
from tests.fixtures.ovs import PrivateOVS

NAME = "ovs-binding"
REF = "Linux bridge binding"
#: ADD and DEL at most this times the Linux bridge binding's (median).
GOAL = 1.2


def _timed(call: Any, **kw: Any) -> float:
    started = time.perf_counter()
    call(**kw)
    return time.perf_counter() - started


def run(ctx: Context) -> Outcome:
    count = ctx.scale(100, 5)
    switch = PrivateOVS().start()
    br_ovs = "ksvbo" + secrets.token_hex(4)
    br_lnx = "ksvbl" + secrets.token_hex(4)
    net = ipaddress.IPv4Network(f"10.97.{secrets.randbelow(256)}.0/24")
    gateway = net.network_address + 1
    try:
        switch.add_bridge(br_ovs)
        kinds = {"ovs": OvsBinding(br_ovs, 1400, ovsdb=ovsdb.Ovsdb(
                     switch.connection, 5.0, bridge=br_ovs)),
                 "bridge": BridgeBinding(br_lnx, 1400)}
        spaces = ctx.ws.netns(2 * count)
        adds: dict[str, list[float]] = {k: [] for k in kinds}
        dels: dict[str, list[float]] = {k: [] for k in kinds}
        names = list(kinds)
        for i in range(count):
            for kind in names if i % 2 == 0 else names[::-1]:
                k = names.index(kind)     # each pod its own netns and address
                extra = ({"iface_id": f"port-{i}", "owner": f"uid-{i}"}
                         if kind == "ovs" else {})
                adds[kind].append(_timed(
                    kinds[kind].plumb, container_id=f"bench-{kind}-{i}",
                    ifname="eth0", netns=spaces[2 * i + k],
                    address=ipaddress.IPv4Interface(f"{net[10 + 2 * i + k]}/24"),
                    gateway=gateway, mac=None, **extra))
        for i in range(count):
            for kind in names if i % 2 == 0 else names[::-1]:
                dels[kind].append(_timed(
                    kinds[kind].unplumb, container_id=f"bench-{kind}-{i}",
                    ifname="eth0", netns=spaces[2 * i + names.index(kind)]))
    finally:
        switch.close()
        ip("link", "del", br_lnx)
    stats = {k: {"ADD": summarize(adds[k]), "DEL": summarize(dels[k])}
             for k in kinds}
    figures = []
    for command in ("ADD", "DEL"):
        for key in ("median", "p90"):
            figures.append(Figure(
                NAME, f"OVS binding: {command} {key} (n={count})",
                stats["ovs"][command][key] * 1000, "ms",
                stats["bridge"][command][key] * 1000, REF,
                goal=GOAL if key == "median" else None, goal_on="ratio"))
    return Outcome(figures, raw={"adds_s": adds, "dels_s": dels,
                                 "summary_s": stats},
                   notes=[f"{count} pods one at a time, in-process plumb and "
                          "unplumb (no shim, no daemon); OVS: a private "
                          "ovsdb-server and ovs-vswitchd, userspace datapath; "
                          "interleaved, order alternating."])
