"""IpamStore: order, limits, persistence, threads, processes and SIGKILL."""
from __future__ import annotations

import concurrent.futures
import ipaddress
import multiprocessing
import os
import pathlib
import signal
import sqlite3
import stat
import statistics
import subprocess
import sys
import textwrap
import time

import pytest
from oslo_config import cfg

from kuryr_supervisor import errors
from kuryr_supervisor.cni.ipam import Allocation, IpamStore, PodRef
from kuryr_supervisor.conf import ipam as ipam_conf

NET = ipaddress.IPv4Network("10.99.0.0/24")
POD = PodRef("default", "web", "uid-1")


def ip(text: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(text)


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "state" / "ipam.sqlite")


def alloc(store: IpamStore, cid: str, ifname: str = "eth0") -> Allocation:
    return store.allocate(cid, ifname, netns=f"/var/run/netns/{cid}", pod=POD)


def test_allocate_records_everything_and_skips_gateway(db: str) -> None:
    store = IpamStore(db, NET)
    first = alloc(store, "c1")
    assert first.address == ipaddress.IPv4Interface("10.99.0.2/24")
    assert first.gateway == ip("10.99.0.1")
    assert (first.container_id, first.ifname, first.pod) == ("c1", "eth0", POD)
    assert first.netns == "/var/run/netns/c1"
    assert abs(first.created - time.time()) < 5
    assert store.get("c1", "eth0") == first
    assert store.get("c1", "eth1") is None
    assert store.list() == [first]


def test_directory_and_file_are_private(db: str) -> None:
    IpamStore(db, NET)
    assert stat.S_IMODE(os.stat(os.path.dirname(db)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600


def test_gateway_network_broadcast_never_handed_out(db: str) -> None:
    net = ipaddress.IPv4Network("10.99.0.0/28")
    store = IpamStore(db, net, gateway=ip("10.99.0.7"))
    got = [alloc(store, f"c{i}").address.ip for i in range(13)]
    assert sorted(got) == [h for h in net.hosts() if h != ip("10.99.0.7")]
    with pytest.raises(errors.AddressExhausted):
        alloc(store, "one-more")


def test_range_limits_and_exhaustion(db: str) -> None:
    store = IpamStore(db, NET, range_start=ip("10.99.0.10"),
                      range_end=ip("10.99.0.12"))
    got = [alloc(store, f"c{i}").address.ip for i in range(3)]
    assert got == [ip("10.99.0.10"), ip("10.99.0.11"), ip("10.99.0.12")]
    with pytest.raises(errors.AddressExhausted) as info:
        alloc(store, "c3")
    assert info.value.wire.code == 101
    store.release("c1", "eth0")
    assert alloc(store, "c3").address.ip == ip("10.99.0.11")


def test_duplicate_is_already_exists_and_keeps_the_first(db: str) -> None:
    store = IpamStore(db, NET)
    first = alloc(store, "c1")
    with pytest.raises(errors.AlreadyExists):
        alloc(store, "c1")
    assert store.list() == [first]
    assert alloc(store, "c1", "eth1").address != first.address


def test_release_is_idempotent(db: str) -> None:
    store = IpamStore(db, NET)
    first = alloc(store, "c1")
    assert store.release("c1", "eth0") == first
    assert store.release("c1", "eth0") is None
    assert store.release("never", "eth0") is None
    assert store.list() == []


def test_freed_address_is_not_reused_at_once_and_order_wraps(db: str) -> None:
    store = IpamStore(db, NET, range_start=ip("10.99.0.2"),
                      range_end=ip("10.99.0.5"))
    a, b, c = (alloc(store, f"c{i}").address.ip for i in range(3))
    store.release("c0", "eth0")
    assert alloc(store, "d0").address.ip == ip("10.99.0.5")
    assert alloc(store, "d1").address.ip == a  # wrapped to the freed one
    store.release("c1", "eth0")
    store.release("c2", "eth0")
    assert alloc(store, "d2").address.ip == b


def test_persists_across_reopen(db: str) -> None:
    store = IpamStore(db, NET)
    allocations = [alloc(store, f"c{i}") for i in range(3)]
    store.release("c2", "eth0")
    store.close()
    again = IpamStore(db, NET)
    assert again.list() == allocations[:2]
    # The cursor survived too: .4 was freed but is not handed out next.
    assert alloc(again, "c3").address.ip == ip("10.99.0.5")
    again.close()


def test_threads_never_share_an_address(db: str) -> None:
    store = IpamStore(db, NET)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: alloc(store, f"c{i}").address,
                            range(200)))
    assert len(set(got)) == 200
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: store.release(f"c{i}", "eth0"), range(200)))
    assert store.list() == []


def _allocate_many(path: str, tag: str, count: int) -> None:
    store = IpamStore(path, ipaddress.IPv4Network("10.99.0.0/16"))
    for i in range(count):
        store.allocate(f"{tag}-{i}", "eth0", netns="", pod=PodRef("", "", ""))


def test_processes_never_share_an_address(db: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_allocate_many, args=(db, f"p{n}", 50))
             for n in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    store = IpamStore(db, ipaddress.IPv4Network("10.99.0.0/16"))
    addresses = [a.address for a in store.list()]
    assert len(addresses) == 100 and len(set(addresses)) == 100


def test_store_used_before_fork_works_in_parent_and_child(db: str) -> None:
    store = IpamStore(db, NET)
    alloc(store, "parent-before")
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=lambda: [alloc(store, f"child-{i}")
                                        for i in range(20)])
    child.start()
    for i in range(20):
        alloc(store, f"parent-{i}")
    child.join(30)
    assert child.exitcode == 0
    addresses = [a.address for a in store.list()]
    assert len(addresses) == 41 and len(set(addresses)) == 41


KILLABLE = textwrap.dedent("""
    import ipaddress, sys
    from kuryr_supervisor.cni.ipam import Allocation, IpamStore, PodRef
    store = IpamStore(sys.argv[1], ipaddress.IPv4Network("10.99.0.0/16"))
    i = 0
    while True:
        store.allocate(f"{sys.argv[2]}-{i}", "eth0", netns="",
                       pod=PodRef("", "", ""))
        print(i, flush=True)
        if i % 3 == 2:
            store.release(f"{sys.argv[2]}-{i - 1}", "eth0")
        i += 1
""")


@pytest.mark.parametrize("delay", [0.05, 0.13, 0.31, 0.5, 0.77, 1.1])
def test_sigkill_mid_allocation_leaves_a_consistent_db(db: str, delay: float) -> None:
    # Two writers, one of which is killed at an arbitrary instant.
    IpamStore(db, ipaddress.IPv4Network("10.99.0.0/16"))
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    victim = subprocess.Popen([sys.executable, "-c", KILLABLE, db, "v"],
                              stdout=subprocess.PIPE, text=True, env=env)
    other = subprocess.Popen([sys.executable, "-c", KILLABLE, db, "o"],
                             stdout=subprocess.DEVNULL, env=env)
    assert victim.stdout is not None
    first = victim.stdout.readline()  # started allocating
    time.sleep(delay)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    other.kill()
    other.wait()
    reported = [int(line) for line in (first + victim.stdout.read()).split()]
    assert reported

    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    store = IpamStore(db, ipaddress.IPv4Network("10.99.0.0/16"))
    rows = store.list()
    addresses = [a.address for a in rows]
    assert len(addresses) == len(set(addresses))
    held = {a.container_id for a in rows if a.container_id.startswith("v-")}
    # Everything reported allocated (and not released) is there; at most
    # the one allocation in flight at the kill may be there unreported.
    last = reported[-1]
    expected = {f"v-{i}" for i in reported
                if not (i % 3 == 1 and i + 1 <= last)}
    assert expected <= held <= expected | {f"v-{last + 1}", f"v-{last - 1}"}
    # The store goes on handing out fresh addresses.
    fresh = alloc(store, "after-kill").address
    assert fresh not in addresses


def test_unusable_file_is_an_environment_fault(tmp_path: pathlib.Path) -> None:
    """A file that is not a database is the node's fault: it must not count
    against the ADD failure budget (restarting cannot fix it)."""
    bad = tmp_path / "ipam.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(errors.StoreCorrupt) as info:
        IpamStore(str(bad), NET)
    assert not info.value.wire.counts_as_failure
    assert info.value.wire.code == 105
    with pytest.raises(errors.IpamStoreError):
        IpamStore(str(tmp_path), NET)  # a directory


@pytest.mark.parametrize("kwargs, message", [
    ({"gateway": ip("10.1.0.1")}, "gateway 10.1.0.1"),
    ({"range_start": ip("10.99.0.0")}, "range_start"),
    ({"range_end": ip("10.99.0.255")}, "range_end"),
    ({"range_start": ip("10.99.0.9"), "range_end": ip("10.99.0.8")}, "after"),
])
def test_bad_parameters_are_value_errors(db: str, kwargs: dict[str, ipaddress.IPv4Address],
                                        message: str) -> None:
    with pytest.raises(ValueError, match=message):
        IpamStore(db, NET, **kwargs)


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    ipam_conf.register_opts(conf)
    conf([])
    return conf


def test_conf_defaults_are_valid(conf: cfg.ConfigOpts) -> None:
    settings = ipam_conf.settings(conf)
    assert settings.subnet == ipaddress.IPv4Network("10.99.0.0/16")
    assert settings.gateway is None
    assert settings.db_path == "/var/lib/kuryr-supervisor/ipam.sqlite"


@pytest.mark.parametrize("option, value, message", [
    ("gateway", "10.1.0.1",
     "[ipam] gateway 10.1.0.1 is not inside subnet 10.99.0.0/16"),
    ("subnet", "10.99.0.1/16", "[ipam] subnet '10.99.0.1/16'"),
    ("subnet", "10.99.0.0/31", "[ipam] subnet 10.99.0.0/31 is too small"),
    ("range_start", "nonsense", "[ipam] range_start 'nonsense'"),
    ("range_end", "10.99.255.255", "[ipam] range_end 10.99.255.255"),
    ("state_dir", "relative", "[ipam] state_dir 'relative'"),
])
def test_conf_validate_names_the_option(conf: cfg.ConfigOpts, option: str, value: str,
                                      message: str) -> None:
    conf.set_override(option, value, group="ipam")
    with pytest.raises(ValueError) as info:
        ipam_conf.validate(conf)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_timing_allocate(db: str) -> None:
    store = IpamStore(db, ipaddress.IPv4Network("10.99.0.0/16"))
    times = []
    for i in range(300):
        start = time.perf_counter()
        alloc(store, f"c{i}")
        times.append(time.perf_counter() - start)
    print(f"\nallocate median {statistics.median(times) * 1000:.2f} ms "
          f"(max {max(times) * 1000:.2f} ms)")
