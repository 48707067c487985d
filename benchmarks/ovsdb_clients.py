"""Benchmark ``ovsdb-clients`` — what a held OVSDB connection costs a
worker, for each way of holding one: our standard-library JSON-RPC client
(:mod:`kuryr_supervisor.cni.ovsdb`, the reference), the ``ovs`` package's
IDL and ovsdbapp (as os-vif uses it).

Each candidate runs in a fresh interpreter against one private Open
vSwitch (``tests/fixtures/ovs``): its memory is the proportional set size
(``/proc/self/smaps_rollup`` Pss) after importing it, connecting and one
transaction, minus that of the same interpreter before the import (the
standard library modules every worker has loaded already: json, socket,
threading, logging, typing, dataclasses...); its speed the
median and p90 of 200 add-port (Interface with external_ids and MTU, one
transaction) then del-port pairs. ``ovs`` and ovsdbapp are not
dependencies of the project: give a Python that has them in
``KURYR_BENCH_OVSDB_PYTHON`` (without it they are reported as skipped).
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.harness import REPO
from benchmarks.stats import Figure
from tests.fixtures.ovs import PrivateOVS

NAME = "ovsdb-clients"
REF = "stdlib JSON-RPC (ours)"

_CHILD = r'''
import json, socket, sys, threading, time
# What every worker of the daemon has loaded already (oslo.log, cotyledon).
import codecs, dataclasses, enum, inspect, logging, random, re, typing
def pss():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
kind, remote, bridge, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ids = {"iface-id": "port", "attached-mac": "fa:16:3e:00:00:01",
       "kuryr-supervisor": "cni"}
before = pss()
if kind == "stdlib":
    sys.path.insert(0, sys.argv[5])
    from kuryr_supervisor.cni.ovsdb import Ovsdb
    db = Ovsdb(remote, 5.0, bridge=bridge)
    def add(name):
        db.add_port(bridge, name, ids, 1400)
    def delete(name):
        db.del_port(bridge, name)
elif kind == "ovs-idl":
    import ovs.db.idl as idl_mod, ovs.poller
    helper = idl_mod.SchemaHelper(
        location="/usr/share/openvswitch/vswitch.ovsschema")
    helper.register_columns("Open_vSwitch", ["external_ids"])
    helper.register_columns("Bridge", ["name", "ports", "datapath_type"])
    helper.register_columns("Port", ["name", "interfaces", "external_ids"])
    helper.register_columns("Interface", ["name", "external_ids",
                                          "mtu_request", "ofport", "error"])
    idl = idl_mod.Idl(remote, helper)
    while not idl.has_ever_connected() or idl.change_seqno == 0:
        idl.run(); p = ovs.poller.Poller(); idl.wait(p); p.timer_wait(100); p.block()
    def commit(fill):
        while True:
            txn = idl_mod.Transaction(idl)
            fill(txn)
            status = txn.commit_block()
            if status != idl_mod.Transaction.TRY_AGAIN:
                assert status in (idl_mod.Transaction.SUCCESS,
                                  idl_mod.Transaction.UNCHANGED), status
                return
            idl.run()
    def bridge_row():
        return next(r for r in idl.tables["Bridge"].rows.values()
                    if r.name == bridge)
    def add(name):
        def fill(txn):
            iface = txn.insert(idl.tables["Interface"])
            iface.name, iface.external_ids, iface.mtu_request = name, ids, [1400]
            port = txn.insert(idl.tables["Port"])
            port.name, port.interfaces = name, [iface]
            bridge_row().addvalue("ports", port.uuid)
        commit(fill)
    def delete(name):
        def fill(txn):
            port = next(r for r in idl.tables["Port"].rows.values()
                        if r.name == name)
            bridge_row().delvalue("ports", port.uuid)
        commit(fill)
else:
    from ovsdbapp.backend.ovs_idl import connection
    from ovsdbapp.schema.open_vswitch import impl_idl
    conn = connection.Connection(
        connection.OvsdbIdl.from_server(remote, "Open_vSwitch"), timeout=5)
    api = impl_idl.OvsdbIdl(conn)
    def add(name):
        with api.transaction(check_error=True) as txn:
            txn.add(api.add_port(bridge, name))
            txn.add(api.db_set("Interface", name, ("external_ids", ids),
                               ("mtu_request", 1400)))
    def delete(name):
        api.del_port(name, bridge).execute(check_error=True)
add("ksvwarm00000000"); delete("ksvwarm00000000")
memory = pss() - before
pairs = []
for i in range(count):
    name = "ksv%012x" % i
    t = time.perf_counter(); add(name); delete(name)
    pairs.append(time.perf_counter() - t)
print(json.dumps({"memory": memory, "pairs": pairs}))
'''


def _measure(python: str, kind: str, switch: PrivateOVS, bridge: str,
             count: int) -> dict[str, Any] | str:
    done = subprocess.run(
        [python, "-c", _CHILD, kind, switch.connection, bridge, str(count),
         str(REPO)], capture_output=True, text=True, timeout=600,
        check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(ctx: Context) -> Outcome:
    count = ctx.scale(200, 20)
    other = os.environ.get("KURYR_BENCH_OVSDB_PYTHON", "")
    switch = PrivateOVS().start()
    bridge = "ksvdb" + secrets.token_hex(4)
    results: dict[str, dict[str, Any] | str] = {}
    try:
        switch.add_bridge(bridge)
        results["stdlib"] = _measure(sys.executable, "stdlib", switch,
                                     bridge, count)
        for kind in ("ovs-idl", "ovsdbapp"):
            results[kind] = (_measure(other, kind, switch, bridge, count)
                             if other else "skipped: no "
                             "KURYR_BENCH_OVSDB_PYTHON")
    finally:
        switch.close()
    ref = results["stdlib"]
    if isinstance(ref, str):
        raise RuntimeError(f"stdlib client failed: {ref}")
    figures, notes = [], []
    for kind, got in results.items():
        if isinstance(got, str):
            notes.append(f"{kind}: {got}")
            continue
        pairs = sorted(got["pairs"])
        ref_pairs = sorted(ref["pairs"])
        for key, at in (("median", 0.5), ("p90", 0.9)):
            figures.append(Figure(
                NAME, f"{kind}: add+del port {key} (n={count})",
                pairs[int(at * (len(pairs) - 1))] * 1000, "ms",
                ref_pairs[int(at * (len(ref_pairs) - 1))] * 1000, REF))
        figures.append(Figure(NAME, f"{kind}: PSS added by the connection",
                              got["memory"] / 2**20, "MiB",
                              ref["memory"] / 2**20, REF))
    return Outcome(figures, raw={"results": results}, notes=notes or [
        f"{count} add+del pairs each, one private ovsdb-server and "
        "ovs-vswitchd (userspace datapath)"])
