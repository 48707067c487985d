"""Benchmark services — Kubernetes Services as Octavia load balancers on
the real OVN stack, with a real Octavia (the ``ovn`` provider).

The tests' stack (tests/fixtures/ovn: OVN central, two nodes on the
userspace datapath, Neutron ML2/OVN on the real Keystone and MariaDB),
Octavia's API and OVN driver agent from PyPI (tests/fixtures/ovn/lb.py),
the Kubernetes API a fake (tests/fixtures/fakeapi.py) the benchmark writes
Services and EndpointSlices into as the API server and the EndpointSlice
controller would, and a controller daemon whose only handler is
``services``, every ``[services]`` option at its default. In one run:

* **traffic**: member pods on node 1 answering TCP and UDP, a client pod
  on node 2 (tests/fixtures/ovn/svcpods.py). Service created (with its
  EndpointSlice) → first TCP and first UDP answer through its VIP, p50
  and p99 (goal p99 2 s); an endpoint removed or added → the traffic
  follows (the first of ten answers in a row none from the one removed,
  one at least from the one added), p50 and p99 per protocol (goal p99
  1 s). The reference is the same watch from the same client of a
  member pod directly (no VIP);
* **scale**: 100 Services of one TCP port and three endpoints each
  (addresses on the pod subnet: the OVN provider needs no port behind a
  member): Octavia's writes per Service created and per EndpointSlice
  changed, counted in Octavia's own access log (goals 1.2 and 1); a
  graceful restart of the controller: Octavia and Kubernetes writes
  (goal 0 each); every Service deleted: load balancers, listeners,
  pools, VIP ports, security groups and NB Load_Balancer rows left (goal
  0), asked of Octavia, Neutron and OVN;
* **kills**: the 100 Services added in 20 batches, after each batch the
  controller (master and workers, every process of its session, as a
  container's) SIGKILLed at a random moment within 4 s of its first write
  to Octavia, a new one started: duplicate
  load balancers (two for one Service or one VIP, goal 0), and what is
  left once all are deleted (goal 0).

``--quick``: 10 Services, 3 kills, few samples. The client watches a VIP
with an attempt every 50 ms, several in flight (:data:`_WATCH`): a
first answer is timed when it arrives, traffic that follows from the
first answer of ten in a row that say so; each late by at most one step
and the start of a process in the client's netns, as the reference (the
same watch of a pod) is.
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import os
import random
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Collection
from pathlib import Path
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.stats import Figure, summarize

NAME = "services"
GOAL_FIRST_S = 2.0
GOAL_FOLLOW_S = 1.0
GOAL_WRITES_CREATE = 1.2
GOAL_WRITES_CHANGE = 1.0
#: A write in Octavia's API access log (gunicorn's): method, path, status.
ACCESS = re.compile(r'"(POST|PUT|DELETE) (/v2/lbaas/\S*) HTTP/[\d.]+" (\d{3})')
#: Seconds after a phase converged before its writes are counted (a
#: trailing write would land there), and after a restart is ready.
QUIET = 3.0
RESTART_WATCH = 10.0
#: A controller of the kill phase is killed within this many seconds of
#: its first write (uniformly).
KILL_WITHIN = 4.0


#: The client's watch of HOST:PORT (tcp or udp): an attempt every STEP
#: seconds, each on a socket of its own (a UDP one from a source port never
#: used before: see svcpods), several in flight, each given LIFE seconds,
#: until the last WINDOW attempts (in the order sent) were all answered,
#: none by a name of GONE, and by every name of NEW, or SECONDS passed.
#: Prints every attempt as [sent, answered, name] (monotonic seconds, the
#: system's clock the caller reads too; "" for no answer).
_WATCH = """
import json, selectors, socket, sys, time
proto, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
end = time.monotonic() + float(sys.argv[4])
source = int(sys.argv[5])
gone = set(filter(None, sys.argv[6].split(",")))
new = set(filter(None, sys.argv[7].split(",")))
window, step, life = int(sys.argv[8]), float(sys.argv[9]), 0.5
sel = selectors.DefaultSelector()
attempts = []
def finish(a, name):
    if a[1] is None:
        a[1], a[2] = time.monotonic(), name
        sel.unregister(a[3])
        a[3].close()
def satisfied():
    done = []
    for a in attempts:
        if a[1] is None:
            break
        done.append(a[2])
    last = done[-window:]
    return len(last) == window and all(n and n not in gone for n in last) \
        and new <= set(last)
nxt = time.monotonic()
while time.monotonic() < end and not satisfied():
    now = time.monotonic()
    if now >= nxt:
        nxt = now + step
        if proto == "tcp":
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((host, port))
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("", source + len(attempts)))
            s.setblocking(False)
            s.sendto(b"?", (host, port))
        a = [now, None, "", s]
        attempts.append(a)
        sel.register(s, selectors.EVENT_READ, a)
    for key, _ in sel.select(max(0.0, min(nxt, end) - time.monotonic())):
        try:
            got = key.fileobj.recv(64).decode().strip()
        except OSError:
            got = ""
        finish(key.data, got)
    for a in attempts:
        if a[1] is None and time.monotonic() - a[0] > life:
            finish(a, "")
for a in attempts:
    if a[1] is None:
        finish(a, "")
print(json.dumps([a[:3] for a in attempts]))
"""
#: Seconds between two attempts of a watch: a figure is late by at most
#: this (the old probes, one attempt at a time, each waiting for its
#: answer up to 0.2 s (TCP) or 0.3 s (UDP), and a new process per ten
#: answers when following a change, were late by 0.25 to 0.8 s).
STEP = 0.05


class Probes:
    """The client pod's watches (:data:`_WATCH`), each UDP datagram from a
    source port of its own even with watches running side by side."""

    def __init__(self, client: Any) -> None:
        self.client, self.lock, self.next = client, threading.Lock(), 20000

    def watch(self, proto: str, host: str, port: int, seconds: float, *,
              gone: Collection[str] = (), new: Collection[str] = (),
              window: int = 1) -> list[tuple[float, float, str]]:
        """Every attempt of one watch (see :data:`_WATCH`): sent,
        answered (monotonic seconds), who answered ("" for none)."""
        import json
        with self.lock:
            source = self.next
            self.next = 20000 + (source - 20000 + int(seconds / STEP) + 4
                                 ) % 40000
        done = self.client.run(
            "/usr/bin/python3", "-c", _WATCH, proto, host, str(port),
            str(seconds), str(source), ",".join(sorted(gone)),
            ",".join(sorted(new)), str(window), str(STEP),
            timeout=seconds + 10, check=True)
        return [(float(s), float(a), str(n)) for s, a, n in
                json.loads(done.stdout)]

    def first(self, proto: str, host: str, port: int, since: float,
              timeout: float = 60.0) -> float | None:
        """Seconds from ``since`` to the first answer (None: none)."""
        answered = [a for _, a, n in self.watch(proto, host, port, timeout)
                    if n]
        return min(answered) - since if answered else None

    def until(self, proto: str, host: str, port: int, since: float,
              gone: set[str], new: set[str], timeout: float = 60.0
              ) -> float | None:
        """Seconds from ``since`` to the first answer of the first ten in
        a row (in the order sent) all answered, none by one of ``gone``,
        one at least by each of ``new``: the traffic follows from then."""
        attempts = self.watch(proto, host, port, timeout, gone=gone,
                              new=new, window=10)
        for i in range(len(attempts) - 9):
            names = [n for _, _, n in attempts[i:i + 10]]
            if all(n and n not in gone for n in names) and new <= set(names):
                return attempts[i][1] - since
        return None


class Bench:
    """The stack, Octavia, the fake API and the controllers of one run."""

    def __init__(self, ctx: Context, stack: Any, octavia: Any) -> None:
        from tests.fixtures.fakeapi import FakeAPI
        from tests.fixtures.lbclouds import LbCloud
        from tests.fixtures.ovn.svcpods import Pods
        self.ctx, self.stack, self.octavia = ctx, stack, octavia
        self.api = FakeAPI().start()
        self.pods = Pods(stack, octavia)
        self.tmp = ctx.ws.tmp / "services"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.lbs = LbCloud("real", octavia.cloud, octavia.service_subnet_id,
                           octavia.service_cidr, octavia.pod_subnet_id,
                           octavia.pod_cidr).api(self.tmp)
        self.tag = f"kuryr-supervisor:{self.api.namespaces['kube-system']}"
        self.daemons: list[Any] = []

    def close(self) -> None:
        for d in self.daemons:
            d.close()
        self.pods.close()
        self.api.stop()

    # -- the controller ----------------------------------------------------------
    def controller(self) -> Any:
        """A new controller daemon (services only), started."""
        from tests.fixtures.clouds import controller_options
        from tests.fixtures.daemon import Daemon
        workdir = self.tmp / f"controller-{len(self.daemons)}"
        workdir.mkdir()
        d = Daemon(workdir, controller_options(
            self.octavia.cloud, self.api.url,
            controller={"handlers": "services",
                        "pod_network_id": self.octavia.pod_network_id,
                        "pod_subnet_id": self.octavia.pod_subnet_id},
            services={"service_subnet_id": self.octavia.service_subnet_id}))
        self.daemons.append(d)
        return d.start()

    @staticmethod
    def kill(d: Any) -> None:
        """Every process of the controller's session SIGKILLed at once."""
        from tests.fixtures.daemon import session_pids
        for pid in session_pids(d.pid) | {d.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        d.close()

    # -- the cluster ---------------------------------------------------------------
    def service(self, name: str, vip: str, addresses: list[str], *,
                udp: bool = False) -> str:
        """A Service (TCP 80, with ``udp`` UDP 53 too) and its
        EndpointSlice; its UID."""
        ports = [{"name": "http", "protocol": "TCP", "port": 80,
                  "targetPort": "http"}]
        if udp:
            ports.append({"name": "dns", "protocol": "UDP", "port": 53,
                          "targetPort": "dns"})
        uid = self.api.add_service("default", name, vip, ports=ports)[
            "metadata"]["uid"]
        self.endpoints(name, addresses)
        return str(uid)

    def endpoints(self, name: str, addresses: list[str]) -> None:
        self.api.put_endpointslice("default", f"{name}-x1", name,
                                   addresses=addresses,
                                   ports={"http": 8080, "dns": 5353})

    def delete_all(self) -> None:
        for namespace, name in list(self.api.services):
            self.api.delete_service(namespace, name)
        for namespace, name in list(self.api.endpointslices):
            self.api.delete_endpointslice(namespace, name)

    # -- what Octavia, Neutron and OVN have ---------------------------------------
    def ours(self) -> list[Any]:
        from kuryr_supervisor.controller.services.inventory import SERVICES_TAG
        return list(self.lbs.load_balancers(tags=[self.tag, SERVICES_TAG]))

    def log_size(self) -> int:
        return os.path.getsize(self.octavia.octavia.api.log)

    def writes(self, since: int) -> list[tuple[str, str, int]]:
        """Octavia's writes logged after byte ``since`` of its access log."""
        with open(self.octavia.octavia.api.log, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        return [(m.group(1), m.group(2), int(m.group(3)))
                for m in ACCESS.finditer(text)]

    def converged(self, want: dict[str, set[str]], d: Any,
                  timeout: float) -> float:
        """Seconds until every Service of ``want`` (uid → member
        addresses) has its load balancer ACTIVE with those members, as
        Octavia's status trees say. They are read once the controller
        ``d`` has no Service pending (its ``/metrics``), or every 5 s
        when it does not say: a hundred trees read every second would
        load the one Octavia API worker the handler waits for."""
        started, done, read = time.monotonic(), set[str](), 0.0
        prefix = f"{self.tag}:"
        while time.monotonic() - started < timeout:
            if _pending(d) != 0 and time.monotonic() - read < 5.0:
                time.sleep(0.5)
                continue
            read = time.monotonic()
            lbs = {lb.name[len(prefix):]: lb for lb in self.ours()}
            for uid in set(want) - done:
                lb = lbs.get(uid)
                if lb is None or lb.status != "ACTIVE":
                    continue
                tree = self.lbs.tree(lb.id)
                if tree is not None and tree.settled and tree.members and all(
                        {m.address for m in ms} == want[uid]
                        for ms in tree.members.values()):
                    done.add(uid)
            if done >= set(want):
                return time.monotonic() - started
            time.sleep(0.5)
        raise RuntimeError(f"{len(set(want) - done)} of {len(want)} Services "
                           f"not converged after {timeout:.0f} s")

    def active(self, uid: str, members: set[str], since: float,
               timeout: float = 60.0) -> float | None:
        """Seconds from ``since`` until the Service's load balancer is
        settled with ``members`` in every pool, as Octavia says."""
        name, lb_id = f"{self.tag}:{uid}", ""
        while time.monotonic() - since < timeout:
            if not lb_id:
                lb_id = next((x.id for x in self.ours() if x.name == name), "")
            tree = self.lbs.tree(lb_id) if lb_id else None
            if tree is not None and tree.settled and tree.members and all(
                    {m.address for m in ms} == members
                    for ms in tree.members.values()):
                return time.monotonic() - since
            time.sleep(0.25)
        return None

    def leftovers(self, timeout: float = 120.0) -> dict[str, int]:
        """What is left of the cluster's load balancers, once nothing is
        (or ``timeout`` passed): by kind, each asked of its owner."""
        from kuryr_supervisor.controller.services.inventory import SERVICES_TAG
        tags = [self.tag, SERVICES_TAG]
        deadline = time.monotonic() + timeout
        while True:
            ports = self.stack.admin(
                "GET", "/v2.0/ports", network_id=self.octavia.service_network_id
            ).expect(200)["ports"]
            groups = self.stack.admin("GET", "/v2.0/security-groups"
                                      ).expect(200)["security_groups"]
            left = {"load balancers": len(self.lbs.load_balancers()),
                    "listeners": len(self.lbs.listeners(tags=tags)),
                    "pools": len(self.lbs.pools(tags=tags)),
                    "VIP ports": sum(p["name"].startswith("ovn-lb-vip-")
                                     for p in ports),
                    "security groups": sum(
                        g["name"].startswith("lb-") or self.tag in
                        g.get("tags", []) for g in groups),
                    "NB Load_Balancers": len(self.octavia.ovn_load_balancers())}
            if not any(left.values()) or time.monotonic() > deadline:
                return left
            time.sleep(1.0)


def _pending(d: Any) -> float | None:
    """The controller's Services pending (its ``/metrics``), None if it
    does not answer."""
    try:
        with urllib.request.urlopen(
                f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    found = re.search(r'^kuryr_supervisor_services\{state="pending"\} (\S+)$',
                      text, re.M)
    return float(found.group(1)) if found else None


def _vips(start: int, count: int) -> list[str]:
    return [f"10.43.0.{start + i}" for i in range(count)]


def _members(i: int, shift: int = 0) -> list[str]:
    """Three addresses of the pod subnet (no pod behind them)."""
    return [f"10.42.0.{100 + (3 * i + k + shift) % 150}" for k in range(3)]


def _traffic(b: Bench, figures: list[Figure], raw: dict[str, Any],
             notes: list[str]) -> None:
    node1, node2 = b.stack.fabric.nodes
    pods = {n: b.pods.make(node1, n) for n in ("a", "b", "c")}
    probes = Probes(b.pods.make(node2))
    ctx, a = b.ctx, pods["a"].address
    ref: dict[str, list[float]] = {"tcp": [], "udp": []}
    for _ in range(ctx.scale(20, 3)):
        for proto, port in (("tcp", 8080), ("udp", 5353)):
            took = probes.first(proto, a, port, time.monotonic(), 5)
            if took is not None:
                ref[proto].append(took)
    samples: dict[str, list[float]] = collections.defaultdict(list)
    pool = concurrent.futures.ThreadPoolExecutor(3)

    def measure(what: str, uid: str, since: float, members: set[str],
                tcp: Any, udp: Any) -> None:
        """Both protocols probed and Octavia watched, side by side."""
        futures = {"tcp": pool.submit(tcp), "udp": pool.submit(udp),
                   "octavia": pool.submit(b.active, uid, {
                       pods[n].address for n in members}, since)}
        for key, future in futures.items():
            took = future.result()
            if took is None:
                notes.append(f"{what}: no {key} within 60 s")
            else:
                samples[f"{what} {key}"].append(took)
    uids = []
    for i, vip in enumerate(_vips(10, ctx.scale(12, 3))):
        started = time.monotonic()
        uids.append(b.service(f"web{i}", vip, [a, pods["b"].address],
                              udp=True))
        measure("first", uids[-1], started, {"a", "b"},
                lambda v=vip, t=started: probes.first("tcp", v, 80, t),
                lambda v=vip, t=started: probes.first("udp", v, 53, t))
    vip, members = _vips(10, 1)[0], {"a", "b"}
    cycle = [{"a"}, {"a", "c"}, {"a"}, {"a", "b"}]
    for step in range(ctx.scale(12, 4)):
        after = cycle[step % len(cycle)]
        gone, new = members - after, after - members
        changed = time.monotonic()
        b.endpoints("web0", sorted(pods[n].address for n in after))
        measure("follow", uids[0], changed, after,
                lambda t=changed, g=gone, n=new: probes.until(
                    "tcp", vip, 80, t, g, n),
                lambda t=changed, g=gone, n=new: probes.until(
                    "udp", vip, 53, t, g, n))
        members = after
    pool.shutdown()
    raw["traffic"] = {"reference_s": ref, **samples}
    for what, label, goal in (
            ("first", "Service created → first answer through the VIP",
             GOAL_FIRST_S),
            ("follow", "endpoint added/removed → traffic through the VIP "
             "follows", GOAL_FOLLOW_S)):
        for proto in ("tcp", "udp"):
            if not samples[f"{what} {proto}"]:
                continue
            s, r = summarize(samples[f"{what} {proto}"]), summarize(ref[proto])
            for key in ("median", "p99"):
                figures.append(Figure(
                    NAME, f"{label}, {proto.upper()}, other node "
                          f"(n={s['n']}) {key}", s[key] * 1000, "ms",
                    r[key] * 1000, "same probe to a pod, no VIP",
                    goal=goal * 1000 if key == "p99" else None))
        if samples[f"{what} octavia"]:
            s = summarize(samples[f"{what} octavia"])
            figures.append(Figure(
                NAME, "  beside: Octavia's status tree settled with those "
                      "members p50", s["median"] * 1000, "ms"))
    b.delete_all()
    left = b.leftovers()
    if any(left.values()):
        notes.append(f"traffic phase, left after deleting: {left}")


def _scale(b: Bench, d: Any, figures: list[Figure], raw: dict[str, Any],
           notes: list[str]) -> Any:
    """The scale phase; the controller running at its end."""
    n = b.ctx.scale(100, 10)
    want: dict[str, set[str]] = {}
    since = b.log_size()
    started = time.monotonic()
    for i, vip in enumerate(_vips(30, n)):
        want[b.service(f"s{i}", vip, _members(i))] = set(_members(i))
    took = b.converged(want, d, 900)
    time.sleep(QUIET)
    created = b.writes(since)
    figures.append(Figure(NAME, f"{n} Services x 3 endpoints → all ACTIVE "
                                "with their members", took, "s"))
    figures.append(Figure(NAME, "Octavia writes per Service created",
                          len(created) / n, "writes", goal=GOAL_WRITES_CREATE))
    since, want = b.log_size(), {}
    uids = {svc["metadata"]["name"]: svc["metadata"]["uid"]
            for svc in b.api.services.values()}
    changed = time.monotonic()
    for i in range(n):
        b.endpoints(f"s{i}", _members(i, 1))
        want[uids[f"s{i}"]] = set(_members(i, 1))
    took_change = b.converged(want, d, 900)
    time.sleep(QUIET)
    change = b.writes(since)
    figures.append(Figure(NAME, f"{n} EndpointSlices changed (one endpoint "
                                "replaced) → all followed", took_change, "s"))
    figures.append(Figure(NAME, "Octavia writes per EndpointSlice change",
                          len(change) / n, "writes", goal=GOAL_WRITES_CHANGE))
    d.close()
    since, k8s_since = b.log_size(), time.monotonic()
    d = b.controller()
    d.wait_ready(120)
    time.sleep(RESTART_WATCH)
    restart = b.writes(since)
    k8s = [(m, p) for at, m, p, _ in list(b.api.access)
           if at >= k8s_since and m != "GET"]
    figures.append(Figure(NAME, f"controller restart with {n} Services: "
                                "Octavia writes", len(restart), "writes",
                          goal=0))
    figures.append(Figure(NAME, f"controller restart with {n} Services: "
                                "Kubernetes writes", len(k8s), "writes",
                          goal=0))
    deleted = time.monotonic()
    b.delete_all()
    left = b.leftovers()
    figures.append(Figure(NAME, f"{n} Services deleted → nothing left",
                          time.monotonic() - deleted, "s"))
    figures.append(Figure(NAME, f"{n} Services deleted: objects left",
                          sum(left.values()), "objects", goal=0))
    notes.append("scale, left after deleting: " + ", ".join(
        f"{k} {v}" for k, v in left.items()))
    raw["scale"] = {"create_s": took, "change_s": took_change,
                    "created": created, "changed": change, "restart": restart,
                    "k8s_restart": k8s, "left": left,
                    "started": started, "changed_at": changed}
    return d


def _kills(b: Bench, d: Any, figures: list[Figure], raw: dict[str, Any],
           notes: list[str]) -> Any:
    """The kill phase; the last controller running at its end."""
    n, kills = b.ctx.scale(100, 10), b.ctx.scale(20, 3)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    want: dict[str, set[str]] = {}
    lived: list[float] = []
    made: list[tuple[int, int]] = []   # at each kill: Services, their LBs
    since = b.log_size()
    vips = _vips(135, n)
    per = -(-n // kills)
    for k in range(kills):
        for i in range(k * per, min(n, (k + 1) * per)):
            want[b.service(f"k{i}", vips[i], _members(i))] = set(_members(i))
        # Killed at a random moment once it writes: a kill while it
        # starts up (5 s on a loaded machine) would meet no create.
        started, mark = time.monotonic(), b.log_size()
        while not b.writes(mark) and time.monotonic() - started < 60:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, KILL_WITHIN))
        lived.append(time.monotonic() - started)
        b.kill(d)
        made.append((len(want), len(b.ours())))
        d = b.controller()
    took = b.converged(want, d, 900)
    time.sleep(QUIET)
    writes = b.writes(since)
    prefix = f"{b.tag}:"
    lbs = b.lbs.load_balancers()
    by_vip = collections.Counter(lb.vip for lb in lbs)
    by_name = collections.Counter(lb.name for lb in lbs)
    dupes = sum(c - 1 for c in by_vip.values()) + \
        sum(c - 1 for c in by_name.values())
    strays = [lb.name for lb in lbs if lb.name[len(prefix):] not in want]
    errors = sum(lb.status == "ERROR" for lb in lbs)
    figures.append(Figure(NAME, f"{kills} kill -9 while {n} Services are "
                                "made: duplicate load balancers", dupes,
                          "LBs", goal=0))
    figures.append(Figure(NAME, f"  after the last restart → all {n} ACTIVE "
                                "with their members", took, "s"))
    figures.append(Figure(NAME, "  Octavia writes per Service (kills "
                                "included)", len(writes) / n, "writes"))
    b.delete_all()
    left = b.leftovers()
    figures.append(Figure(NAME, "  all deleted after the kills: objects left",
                          sum(left.values()), "objects", goal=0))
    refused = collections.Counter(s for _, _, s in writes if s >= 400)
    notes.append(f"kills (seed {seed}): each {min(lived):.1f} to "
                 f"{max(lived):.1f} s after its controller started, "
                 f"{min(w - m for w, m in made)} to "
                 f"{max(w - m for w, m in made)} of the Services added so "
                 f"far without a load balancer then; "
                 f"{len(lbs)} load balancers for {n} Services, {errors} in "
                 f"ERROR, {len(strays)} no Service's; Octavia refused "
                 f"{dict(refused) or 'none'}; left after deleting: " +
                 ", ".join(f"{k} {v}" for k, v in left.items()))
    raw["kills"] = {"seed": seed, "lived_s": lived, "made": made, "converge_s": took,
                    "writes": writes, "duplicates": dupes, "strays": strays,
                    "left": left}
    return d


def run(ctx: Context) -> Outcome:
    from tests.fixtures.ovn.fabric import available
    from tests.fixtures.ovn.lb import OvnOctavia
    from tests.fixtures.ovn.stack import OvnStack
    from tests.fixtures.realcloud import RealCloud
    why = available()
    if why:
        raise RuntimeError(f"OVN data plane unavailable: {why}")
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    notes: list[str] = []
    cloud = RealCloud()
    stack: OvnStack | None = None
    octavia: OvnOctavia | None = None
    try:
        started = time.monotonic()
        cloud.start()
        stack = OvnStack(cloud).start()
        octavia = OvnOctavia(stack).start()
        figures.append(Figure(NAME, "cold start: real cloud + OVN stack + "
                                    "Octavia", time.monotonic() - started, "s"))
        with stack.in_catalog():
            b = Bench(ctx, stack, octavia)
            try:
                d = b.controller()
                d.wait_ready(120)
                _traffic(b, figures, raw, notes)
                d = _scale(b, d, figures, raw, notes)
                d = _kills(b, d, figures, raw, notes)
                log = Path(d.log_path).read_text(errors="replace")
                if " ERROR " in log or "Traceback" in log:
                    notes.append(f"the last controller's log has ERROR lines "
                                 f"or a traceback: {d.log_path}")
                errors = octavia.errors()
                if errors:
                    notes.append(f"Octavia logged {len(errors)} error lines, "
                                 f"the first: {errors[0][:200]}")
            finally:
                b.close()
    finally:
        if octavia is not None:
            octavia.close()
        if stack is not None:
            stack.close()
        cloud.close()
    notes.append(f"a traffic figure is late by at most one attempt of the "
                 f"client's watch ({STEP * 1000:.0f} ms) and the start of a "
                 f"process in its netns (as the reference); the Services of "
                 f"the scale and kill phases have one TCP port (one pool "
                 f"each)")
    return Outcome(figures, raw=raw, notes=notes)

