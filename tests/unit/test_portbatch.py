"""Neutron bulk port create and the batch window, against the Keystone and
Neutron fakes over real HTTP: chunks, request order, all-or-nothing
refusals falling back to one port at a time, lost answers handed back,
paged port lists."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.making import PortMaker
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.ports import batch as portbatch
from tests.fixtures.openstack import FakeKeystone, FakeNeutron
from tests.unit.test_openstack import neutron_conf

Cloud = tuple[osa.OpenStack, FakeNeutron]


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Cloud]:
    keystone = FakeKeystone().start()
    neutron = FakeNeutron(keystone, cidr="10.40.0.0/20", gateway="10.40.0.1").start()
    yield osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone)), neutron
    neutron.stop()
    keystone.stop()


def pace(api: osa.OpenStack) -> Pace:
    """The pace of the options' defaults (0.5 s a port, at most 120 s, 2 s
    a request), on the adapter's request timeout."""
    return Pace(timeout=api.timeout, per_port=0.5, timeout_max=120.0,
                batch_seconds=2.0, size=portbatch.MAX_PORTS)


def devices(count: int, prefix: str = "pod") -> list[tuple[str, str]]:
    return [(f"kuryr-ns-{prefix}{i}", f"uid-{prefix}{i}") for i in range(count)]


def maker(cloud: Cloud) -> PortMaker:
    """The one path ports are made by (nothing detected: Neutron's MACs)."""
    api, neutron = cloud
    return PortMaker(api, network_id=neutron.network_id,
                     subnet_id=neutron.subnet["id"])


def create(cloud: Cloud, devs: list[tuple[str, str]], in_flight: int = 3
           ) -> tuple[dict[str, osa.Port], dict[str, Exception]]:
    api, _ = cloud
    out = portbatch.create(maker(cloud), devs, tag="kuryr-supervisor:c1",
                           pace=pace(api), in_flight=in_flight)
    assert out.pending == {}                 # every request was answered
    return out.made, out.failed


def one_port_each(neutron: FakeNeutron, uids: list[str]) -> bool:
    return all(len(neutron.ports_for(uid)) == 1 for uid in uids)


def test_bulk_in_chunks_in_request_order(cloud: Cloud) -> None:
    _, neutron = cloud
    devs = devices(250)
    made, failed = create(cloud, devs)
    assert failed == {}
    # 10 alone measures Neutron, then 100 a request, 3 at once
    assert neutron.bulk_sizes[0] == 10
    assert sorted(neutron.bulk_sizes[1:]) == [40, 100, 100]
    assert neutron.counts()["POST /v2.0/ports"] == 4
    assert list(made) == [uid for _, uid in devs]
    for name, uid in devs:
        [port] = neutron.ports_for(uid)
        assert made[uid].id == port["id"] and port["name"] == name
        assert port["tags"] == ["kuryr-supervisor:c1"]
    assert len({p.ip for p in made.values()}) == 250


def test_refused_bulk_falls_back_to_one_by_one(cloud: Cloud) -> None:
    """A bulk Neutron refuses created nothing: each port is then created on
    its own; only the refused one fails; none is doubled."""
    _, neutron = cloud
    devs = devices(5)
    neutron.refuse_name = devs[2][0]
    made, failed = create(cloud, devs)
    assert set(failed) == {devs[2][1]}
    assert isinstance(failed[devs[2][1]], osa.OpenStackRefused)
    assert failed[devs[2][1]].status == 400
    assert set(made) == {uid for _, uid in devs} - {devs[2][1]}
    assert neutron.bulk_sizes == []             # the bulk made nothing
    assert neutron.counts()["POST /v2.0/ports"] == 1 + 5
    assert len(neutron.ports) == 4
    assert one_port_each(neutron, list(made))


def test_quota_uses_what_is_left_then_stops(cloud: Cloud) -> None:
    _, neutron = cloud
    neutron.port_limit = 3
    devs = devices(5) + devices(5, "next")
    made, failed = create(cloud, devs)
    assert len(made) == 3 and len(neutron.ports) == 3
    assert len(failed) == 7
    assert all(isinstance(e, osa.QuotaExceeded) for e in failed.values())
    # the bulk, three single creates and the one refused; nothing after
    assert neutron.counts()["POST /v2.0/ports"] == 1 + 4


def test_lost_answer_handed_back_and_rest_not_tried(cloud: Cloud) -> None:
    """Neutron made the ports but the answer was lost (500): every pod of
    that request gets the error (the caller looks them up before trying
    again); the next chunk is not sent into the outage."""
    _, neutron = cloud
    neutron.lose_bulk_answers = 1
    devs = devices(150)
    made, failed = create(cloud, devs, in_flight=1)
    assert made == {}
    assert set(failed) == {uid for _, uid in devs}
    assert all(isinstance(e, osa.OpenStackUnavailable) for e in failed.values())
    assert neutron.bulk_sizes == [10]           # created, answer lost
    assert neutron.counts()["POST /v2.0/ports"] == 1


def test_every_request_announced_before_it_is_sent(cloud: Cloud) -> None:
    """A leader announces each create, with how long it may still commit
    (how long Neutron plausibly takes for it: its timeout before the pace
    is measured, less after, as the floor per port is not counted; the
    announcer holds it three times that from the fence's end), before
    sending it; an announcement that fails
    sends nothing more: those pods fail with its error, and none is
    handed back as pending (nothing of theirs is at Neutron)."""
    api, neutron = cloud
    said: list[tuple[float, int]] = []
    named: list[list[str]] = []

    def announce(uids: list[str], within: float) -> None:
        said.append((within, neutron.counts()["POST /v2.0/ports"]))
        named.append(uids)
        if len(said) == 3:
            raise RuntimeError("the creates Lease cannot be written")
    devs = devices(250)
    out = portbatch.create(maker(cloud), devs, tag="t", pace=pace(api),
                           in_flight=1, announce=announce)
    # 10 alone, then 100: announced before each was sent; the third never
    assert [posts for _, posts in said] == [0, 1, 2]
    assert neutron.bulk_sizes == [10, 100]
    assert named[:2] == [[u for _, u in devs[:10]],
                         [u for _, u in devs[10:110]]]
    assert all(within >= api.timeout for within, _ in said)
    # the first: its timeout (5 s + 10 * 0.5 s); the second, once a port
    # is measured at a few ms, far less than its timeout
    assert said[0][0] == pytest.approx(api.timeout + 10 * 0.5)
    assert said[1][0] < (api.timeout + 100 * 0.5) / 2, said
    assert len(out.made) == 110 and out.pending == {}
    assert set(out.failed) == {uid for _, uid in devs[110:]}
    assert {str(e) for e in out.failed.values()} == {
        "the creates Lease cannot be written"}


def test_port_list_is_paged(cloud: Cloud) -> None:
    api, neutron = cloud
    neutron.page_limit = 7
    create(cloud, devices(20))
    listed = api.owned_ports(network_id=neutron.network_id, tag="kuryr-supervisor:c1")
    assert sorted(p.device_id for p in listed) == sorted(u for _, u in devices(20))
    assert neutron.counts()["GET /v2.0/ports"] == 3


def test_batch_due_when_full_or_after_the_window() -> None:
    now = [100.0]
    batch = portbatch.Batch(window=0.05, size=3, clock=lambda: now[0])
    assert batch.wake_in() == float("inf") and not batch.due()
    batch.add("a")
    now[0] += 0.02
    batch.add("b")
    batch.add("a")                      # once
    assert len(batch) == 2 and not batch.due()
    assert batch.wake_in() == pytest.approx(0.03)
    now[0] += 0.03
    assert batch.due() and batch.take() == ["a", "b"] and len(batch) == 0
    for uid in "xyz":
        batch.add(uid)
    assert batch.wake_in() == 0.0 and batch.due()      # full
    batch.discard("y")
    assert not batch.due() and "y" not in batch and "x" in batch


def test_resync_plan_keeps_what_a_podport_names() -> None:
    """A pod without a PodPort adopts its oldest port; a pod whose PodPort
    is written keeps the port it names (by id, or by address and MAC) and
    is never rewritten; one whose named port is not listed is verified,
    not re-created; one whose create may still commit waits."""
    import ipaddress

    from kuryr_supervisor.controller.ports import resync
    from kuryr_supervisor.controller.ports.book import PodBook, PodRecord
    from kuryr_supervisor.controller.ports.podports import Named

    def port(pid: str, device: str, created: str, ip: str = "10.0.0.9",
             mac: str = "fa:16:3e:00:00:01") -> osa.Port:
        return osa.Port(id=pid, mac=mac, device_id=device,
                        ip=ipaddress.IPv4Address(ip), subnet_id="s",
                        created_at=created)
    listed = resync.by_device([
        port("b", "u1", "2"), port("a", "u1", "1"),
        port("c", "u2", "1"), port("late", "u2", "0", ip="10.0.0.7", mac="fa:16:3e:00:00:07"),
        port("new", "u5", "1", ip="10.0.0.5", mac="fa:16:3e:00:00:05")])
    assert [p.id for p in listed["u1"]] == ["a", "b"]
    named = {"u2": Named("c", "10.0.0.9", "fa:16:3e:00:00:01"),
             "u3": Named("gone", "10.0.0.3", "fa:16:3e:00:00:03"),
             "u5": Named("old", "10.0.0.5", "fa:16:3e:00:00:05")}
    inflight = {"u4": 10.0, "u6": 1.0}
    book = PodBook()
    book.replace(PodRecord(u, "ns", f"p{u}", named=named.get(u),
                           written=u in named, inflight=inflight.get(u, 0.0))
                 for u in ("u1", "u2", "u3", "u4", "u5", "u6"))
    out = resync.plan(["u1", "u2", "u3", "u4", "u5", "u6", "not-a-pod"],
                      book, listed, now=5.0)
    assert [(uid, p.id) for uid, p in out.write] == [("u1", "a")]
    assert out.keep == {"u1": "a", "u2": "c", "u5": "new"}   # not the older "late"
    assert out.verify == ["u3"] and out.waiting == ["u4"] and out.create == ["u6"]
    assert {u for u, p in book.pods.items() if p.written} == {"u2", "u3", "u5"}
    assert [book.pods[u].port_id for u in ("u1", "u2", "u5")] == [
        "a", "c", "new"]


def test_pace_sizes_requests_and_timeouts_from_measured_latency() -> None:
    from kuryr_supervisor.controller.openstack import pace as portpace
    pace = portpace.Pace(timeout=5.0, per_port=0.5, timeout_max=120.0,
                         batch_seconds=2.0, size=100, clock=lambda: 0.0)
    assert pace.batch_size() == portpace.FIRST and pace.in_flight(3) == 1
    assert pace.timeout_for(10) == 10.0                   # 5 + 10 x 0.5
    pace.answered(10, 2.5)                               # 0.25 s a port
    assert pace.ewma == 0.25 and pace.batch_size() == 8 and pace.in_flight(3) == 3
    assert pace.timeout_for(8) == 5.0 + 8 * 0.75          # 3 x the measure
    assert pace.timeout_for(1000) == 120.0                # bounded
    pace.answered(100, 0.1)                               # Neutron got fast
    assert pace.ewma == pytest.approx(0.3 * 0.001 + 0.7 * 0.25)
    for _ in range(30):
        pace.answered(100, 0.1)
    assert pace.batch_size() == 100                       # at most size
    assert pace.may_commit_until(10.0, 9.0) == 10.0 + portpace.COMMIT_WAIT * 9.0


def test_pace_likely_time_leaves_out_the_floor_per_port() -> None:
    """How long a request is announced for: its timeout until a port is
    measured; then the timeout without its floor per port (never more
    than the timeout itself)."""
    from kuryr_supervisor.controller.openstack import pace as portpace
    pace = portpace.Pace(timeout=5.0, per_port=0.5, timeout_max=120.0,
                         batch_seconds=2.0, size=100, clock=lambda: 0.0)
    assert pace.likely_for(10) == pace.timeout_for(10) == 10.0
    pace.answered(100, 1.0)                              # 10 ms a port
    assert pace.timeout_for(100) == 55.0                  # the floor: 0.5 s
    assert pace.likely_for(100) == pytest.approx(5.0 + 100 * 3 * 0.01)
    pace.answered(1, 1000.0)                             # Neutron got slow
    assert pace.likely_for(100) == pace.timeout_for(100) == 120.0


def test_one_request_timeout_for_every_reader(tmp_path: Path) -> None:
    """``[neutron] timeout`` shorter than ``openstack_timeout`` is the
    request timeout of every reader: the adapter's session and its
    whole-call deadline, the pods' port creates (the pace) and the
    readiness checks' adapter and wait."""
    from kuryr_supervisor.controller.ports import assembly
    from kuryr_supervisor.controller.runtime import HandlerContext, Runtime
    from kuryr_supervisor.master.roles.dependencies import openstack_checks
    from tests.fixtures.fakeapi import FakeAPI
    keystone = FakeKeystone()
    path = tmp_path / "controller.conf"
    path.write_text("\n".join(
        ["[neutron]", "timeout = 2"] +
        [f"{k} = {v}" for k, v in keystone.conf_overrides().items()] +
        ["[controller]", "openstack_timeout = 5", "[supervisor]",
         "health_deadline = 12"]) + "\n")
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    api = osa.OpenStack.from_conf(conf)
    assert (api.timeout, api.deadline) == (2.0, 6.0)
    kube = FakeAPI().start()
    try:
        handler = assembly.build(Runtime(
            HandlerContext(conf, None, lambda _: None),
            kubernetes=kube.client(), openstack=api))
    finally:
        kube.stop()
    assert handler.pace.timeout == 2.0
    assert handler.pace.timeout_for(10) == 2.0 + 10 * 0.5
    checks = openstack_checks(conf)
    check_cloud = checks[0].cloud      # type: ignore[attr-defined]
    assert check_cloud.timeout == 2.0
    assert check_cloud.deadline == pytest.approx(0.8 * 2.0)
