"""The smaller faults of the handover and the pools:

- a create is announced until it could last commit from when it could
  last leave (the write fence's end), not from its announcement;
- a lease runs out after its duration from when this process last saw
  it change (client-go's way), whatever the holder's clock says;
- one pool whose give-back keeps failing, or one claim whose update keeps
  failing, never keeps the other pools from being refilled;
- a login that fails in any check re-runs the ``keystone`` check at once,
  so readiness names Keystone, not Neutron.

Against the Kubernetes API, Keystone and Neutron fakes over HTTP."""
from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.controller.leadership.announcer import ANNOTATION
from kuryr_supervisor.controller.leadership.election import wait_for_leadership
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.pace import COMMIT_WAIT
from kuryr_supervisor.controller.pools.refill import Refill
from kuryr_supervisor.controller.ports.batch import Batch
from kuryr_supervisor.kubernetes.clusterpods import cluster_pod
from kuryr_supervisor.kubernetes.lease import LeaderElector
from kuryr_supervisor.kubernetes.leases import read_lease, write_lease
from kuryr_supervisor.master.roles.dependencies import KeystoneCheck, NeutronCheck
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.poolcloud import PooledNeutron
from tests.unit import test_portpool as pool_base
from tests.unit.test_neutronport import Steps as BatchClock
from tests.unit.test_neutronport import World, window_ends
from tests.unit.test_port_retry_safety import make_world, stop
from tests.unit.test_portpool import free, running, wait_for

#: The pool tests' fixtures.
world, stopping = pool_base.world, pool_base.stopping


class Steps:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


# -- the lease --------------------------------------------------------------------
DURATION = 2


def elector(api: FakeAPI, name: str, *, skew: float = 0.0) -> LeaderElector:
    """``skew``: how far this candidate's wall clock is off."""
    return LeaderElector(api.client(), namespace="kube-system", name="ctl",
                         identity=name, duration=DURATION,
                         clock=lambda: time.time() + skew)


class SkewedHolder:
    """A holder that renews the Lease as client-go does, ``renewTime``
    read on its own clock, ``skew`` seconds off this host's."""

    def __init__(self, api: FakeAPI, skew: float) -> None:
        self.client, self.skew = api.client(), skew
        self.version: str | None = None

    def renew(self) -> None:
        lease = read_lease(self.client.leases, "kube-system", "ctl")
        record = write_lease(
            self.client.leases, "kube-system", "ctl", holder="a", duration=DURATION,
            transitions=0, acquired=lease is None,
            resource_version=None if lease is None else lease.resource_version,
            renewed=time.time() + self.skew)
        self.version = record.resource_version


@pytest.mark.parametrize("skew", [-100.0, 100.0])
def test_a_lease_runs_out_by_what_this_process_saw(api: FakeAPI,
                                                   skew: float) -> None:
    """The holder's clock 100 s behind (its renewals look old) or ahead
    (they look young): the candidate takes over neither while the holder
    renews, nor much later than the duration after the renewals stop."""
    holder = SkewedHolder(api, skew)
    candidate = elector(api, "b")
    holder.renew()
    for _ in range(4):
        assert not candidate.try_acquire_or_renew(), "took a live lease"
        time.sleep(DURATION / 4)
        holder.renew()
    stopped = time.monotonic()
    assert not candidate.try_acquire_or_renew()     # saw the last change
    while not candidate.try_acquire_or_renew():
        assert time.monotonic() - stopped < DURATION + 1.0, \
            "waited on the holder's clock"
        time.sleep(0.05)
    assert time.monotonic() - stopped >= DURATION - 0.1


# -- the announced hold --------------------------------------------------------------
def test_a_create_is_announced_from_the_fences_end(tmp_path: Path) -> None:
    """Where creates must be announced (Neutron's policy refuses the MACs
    the controller would derive)."""
    w = make_world(tmp_path)
    try:
        w.neutron.refuse_macs = True
        w.conf.set_override("api_root", w.api.url, "kubernetes")
        w.conf.set_override("lease_duration", 15, "controller")
        stopping = threading.Event()
        leading = wait_for_leadership(w.conf, stopping, lambda: None,
                                      master_pid=1)
        assert leading is not None
        handler = w.handler(batch=Batch(clock=BatchClock()),
                            fence=leading.fence, announcer=leading.announcer)
        stopping.set()
        w.start(handler)
        pods = w.add(3)
        announced = time.time()
        for pod in pods:
            handler.upsert(cluster_pod(pod))
        window_ends(handler)
        handler.tick()                  # refused for its MACs: again
        handler.retries.now()
        handler.tick()
        lease = w.api.leases[("kube-system",
                              "kuryr-supervisor-controller-creates")]
        until = json.loads(lease["metadata"]["annotations"][ANNOTATION])
        likely = handler.pace.likely_for(3)
        fence_left = 15.0 - 1.0               # renewed just now, 1 s slack
        for pod in pods:
            held = until[pod["metadata"]["uid"]] - announced
            assert held >= fence_left + COMMIT_WAIT * likely - 1.0, held
        renewed = datetime.datetime.fromisoformat(
            lease["spec"]["renewTime"].replace("Z", "+00:00")).timestamp()
        assert renewed <= time.time()
    finally:
        stop(w)


# -- the pools ---------------------------------------------------------------------
def small(world: World) -> None:
    for key, value in (("ports_pool_min", 3), ("ports_pool_max", 3),
                       ("ports_pool_batch", 3),
                       ("ports_pool_update_frequency", 0.2)):
        world.conf.set_override(key, value, "vif_pool")


def test_a_give_back_that_keeps_failing_blocks_no_refill(
        world: World, stopping: threading.Event) -> None:
    small(world)
    handler = running(world, stopping, ("node-a", "node-b"))
    wait_for(lambda: free(handler, "node-a") == 3 and
             free(handler, "node-b") == 3)
    stuck = list(handler.pools.of("node-a").free)[-1]   # given back first
    world.neutron.refuse_deletes.add(stuck)       # a 403 on its DELETE
    world.conf.set_override("ports_pool_max", 2, "vif_pool")
    world.conf.set_override("ports_pool_min", 2, "vif_pool")
    handler.pools.wake.set()
    wait_for(lambda: free(handler, "node-b") == 2)  # b gave its extra back
    # node-b's pool is emptied by its pods: it is refilled, whatever
    # node-a's give-back does.
    taken = [world.api.add_pod("ns", f"b{i}", "node-b") for i in range(2)]
    for pod in taken:
        handler.upsert(cluster_pod(pod))
    window_ends(handler)
    handler.tick()
    assert handler.cloud is not None
    refill = Refill(handler.pools, handler.cloud, handler.owned, handler.pace)
    for _ in range(3):                            # rounds, as the thread runs
        handler.resync(set(handler.book.pods))   # re-adopts the stuck port
        try:
            refill.step(stopping)
        except Exception as exc:  # noqa: BLE001 - what the thread would log
            pytest.fail(f"the refill round stopped: {exc}")
    wait_for(lambda: free(handler, "node-b") == 2 and
             not handler.pools.of("node-b").creating)
    assert stuck in world.neutron.ports


def test_a_claim_that_keeps_failing_blocks_no_refill(
        world: World, stopping: threading.Event) -> None:
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    small(world)
    handler = running(world, stopping, ("node-a", "node-b"))
    wait_for(lambda: free(handler, "node-a") == 3 and
             free(handler, "node-b") == 3)
    neutron.fail_updates.update(handler.pools.of("node-a").free)
    pod = world.api.add_pod("ns", "a0", "node-a")      # its update: 500s
    others = [world.api.add_pod("ns", f"b{i}", "node-b") for i in range(3)]
    for p in [pod, *others]:
        handler.upsert(cluster_pod(p))
    window_ends(handler)
    handler.tick()
    assert len(handler.pools.claims) >= 1
    wait_for(lambda: free(handler, "node-b") == 3, 5)  # refilled meanwhile
    assert len(handler.pools.claims) >= 1              # still failing


# -- Keystone first ----------------------------------------------------------------------
def test_a_failed_login_reruns_the_keystone_check_at_once(
        tmp_path: Path) -> None:
    w = make_world(tmp_path)
    try:
        keystone = w.neutron.keystone
        keystone.token_lifetime = 60
        wall = Steps(time.time())
        keystone.clock = wall
        cloud = osa.OpenStack.from_conf(w.conf, clock=wall)
        every = 10.0
        ks = KeystoneCheck(cloud, lambda: every, wall_clock=wall)
        nt = NeutronCheck(cloud, lambda: "", lambda: every)
        # The checks' turns drift apart: Neutron's comes 5 s before
        # Keystone's.
        assert nt.run(0.0).ok and ks.run(5.0).ok
        keystone.down()                   # Keystone goes...
        wall.now += 45                    # ...and the token is due
        assert ks.meanwhile() is None
        assert not nt.run(every).ok       # Neutron's turn comes first
        # Keystone's view fails at once, before its own next run: the
        # first failing readiness names Keystone, not "no token yet" alone.
        known = ks.meanwhile()
        assert known is not None and not known.ok and \
            "Keystone" in known.message
        result = ks.run(every + 0.1)      # within Keystone's interval
        assert not result.ok and "Keystone" in result.message, result.message
    finally:
        stop(w)
