"""CNIService ordering, rollback and failure budget, with in-memory fakes."""
from __future__ import annotations

import dataclasses
import ipaddress
import multiprocessing
import os
from typing import Any

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol
from kuryr_supervisor.cni.binding.base import CANARY
from kuryr_supervisor.cni.ipam import PENDING, PLUMBED, Allocation, Plumbing, PodRef
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.ports import LazyIpam
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.state import Fault, SharedState

NETNS = "/proc/self/ns/net"
#: The same namespace under another path: another CNI_NETNS to the service.
OTHER_NETNS = f"/proc/{os.getpid()}/ns/net"
GW = ipaddress.IPv4Address("10.1.0.1")


class FakeIpam:
    def __init__(self, size: int = 10) -> None:
        self.allocs: dict[tuple[str, str], Allocation] = {}
        self.free = [ipaddress.IPv4Interface(f"10.1.0.{n}/24")
                     for n in range(2, 2 + size)]
        self.calls: list[str] = []
        self.fail: type[Exception] | None = None
        self.fail_plumbed: type[Exception] | None = None
        self.created = 100.0

    def allocate(self, container_id: str, ifname: str, *, netns: str,
                 pod: PodRef) -> Allocation:
        self.calls.append("allocate")
        if self.fail:
            raise self.fail("store broken")
        if (container_id, ifname) in self.allocs:
            raise errors.AlreadyExists("exists")
        if not self.free:
            raise errors.AddressExhausted("full")
        self.created += 1
        alloc = Allocation(container_id, ifname, self.free.pop(0), GW, netns,
                           pod, self.created, state=PENDING)
        self.allocs[(container_id, ifname)] = alloc
        return alloc

    def plumbed(self, container_id: str, ifname: str, *, netconf: str,
                plumbing: Plumbing) -> None:
        self.calls.append("plumbed")
        if self.fail_plumbed:
            raise self.fail_plumbed("store broken")
        key = (container_id, ifname)
        self.allocs[key] = dataclasses.replace(
            self.allocs[key], state=PLUMBED, netconf=netconf,
            plumbing=plumbing)

    def release(self, container_id: str, ifname: str) -> Allocation | None:
        self.calls.append("release")
        alloc = self.allocs.pop((container_id, ifname), None)
        if alloc:
            self.free.append(alloc.address)
        return alloc

    def get(self, container_id: str, ifname: str) -> Allocation | None:
        return self.allocs.get((container_id, ifname))

    def list(self) -> list[Allocation]:
        return list(self.allocs.values())


@dataclasses.dataclass
class Plumbed:
    host_ifname: str
    host_mac: str = "02:00:00:00:00:01"
    pod_ifname: str = "eth0"
    pod_mac: str = "02:00:00:00:00:02"
    mtu: int = 1500


class FakeBinding:
    def __init__(self, ipam: FakeIpam) -> None:
        self.ipam = ipam
        self.links: set[str] = set()
        self.fail: Exception | None = None
        self.removed: list[str] = []

    @staticmethod
    def host_ifname(container_id: str, ifname: str) -> str:
        return f"ksv{container_id}{ifname}"[:15]

    def plumb(self, *, container_id: str, ifname: str, netns: str,
              address: Any, gateway: Any) -> Plumbed:
        self.ipam.calls.append("plumb")
        if self.fail:
            raise self.fail
        self.links.add(self.host_ifname(container_id, ifname))
        return Plumbed(self.host_ifname(container_id, ifname))

    def unplumb(self, *, container_id: str, ifname: str,
                netns: str | None) -> None:
        self.ipam.calls.append("unplumb")
        self.links.discard(self.host_ifname(container_id, ifname))

    def check(self, **kw: Any) -> None:
        if self.host_ifname(kw["container_id"], kw["ifname"]) not in self.links:
            raise errors.PlumbingError("missing")

    def host_interfaces(self) -> list[str]:
        return sorted(self.links)

    def remove_host_interface(self, name: str) -> None:
        self.removed.append(name)
        self.links.discard(name)


@pytest.fixture
def state() -> SharedState:
    return SharedState.create(multiprocessing.get_context("fork"))


@pytest.fixture
def parts(tmp_path: Any, state: SharedState) -> tuple[CNIService, FakeIpam, FakeBinding]:
    ipam = FakeIpam()
    binding = FakeBinding(ipam)
    service = CNIService(lambda: ipam, binding,
                         ContainerLocks(str(tmp_path / "locks")), state,
                         lock_timeout=0.2, wall_clock=lambda: 1000.0)
    return service, ipam, binding


def req(command: str = "ADD", cid: str = "c1", version: str = "1.1.0",
        extra: dict[str, Any] | None = None, netns: str = NETNS,
        **config: Any) -> protocol.Request:
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid,
           "CNI_IFNAME": "eth0", "CNI_NETNS": netns,
           "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u"}
    return protocol.parse({"env": env, "config": {
        "cniVersion": version, "name": "net", "type": "kuryr-cni", **config,
        **(extra or {})}})


def test_add_allocates_then_plumbs_and_resets_budget(parts: Any,
                                                     state: SharedState) -> None:
    service, ipam, _ = parts
    state.record_cni_failure()
    result = service.handle(req())
    assert ipam.calls == ["allocate", "plumb", "plumbed"]
    assert result is not None and result["ips"][0]["address"] == "10.1.0.2/24"
    assert ipam.get("c1", "eth0").pod == PodRef("ns", "p", "u")
    assert state.cni_failures() == 0


def test_plumb_failure_releases_and_counts(parts: Any, state: SharedState,
                                           tmp_path: Any) -> None:
    service, ipam, binding = parts
    binding.fail = errors.PlumbingError("boom")
    with pytest.raises(errors.PlumbingError):
        service.handle(req())
    assert ipam.calls == ["allocate", "plumb", "release"]
    assert ipam.list() == [] and state.cni_failures() == 1
    assert list((tmp_path / "locks").iterdir()) == []   # no trace on disk


def test_unexpected_exception_is_internal_and_counts(parts: Any,
                                                     state: SharedState) -> None:
    service, ipam, binding = parts
    binding.fail = RuntimeError("surprise")
    with pytest.raises(errors.InternalError) as info:
        service.handle(req())
    assert info.value.wire.code == 100 and ipam.list() == []
    assert state.cni_failures() == 1


def test_ipam_store_error_counts(parts: Any, state: SharedState) -> None:
    service, ipam, _ = parts
    ipam.fail = errors.IpamStoreError
    with pytest.raises(errors.IpamStoreError):
        service.handle(req())
    assert state.cni_failures() == 1


@pytest.mark.parametrize("exc", [errors.ContainerUnknown("netns gone"),
                                 errors.AlreadyExists("dup")])
def test_client_side_plumb_errors_do_not_count(parts: Any, state: SharedState,
                                               exc: errors.CNIError) -> None:
    service, ipam, binding = parts
    binding.fail = exc
    with pytest.raises(type(exc)):
        service.handle(req())
    assert state.cni_failures() == 0 and ipam.list() == []


def test_same_add_again_replays_the_recorded_result(
        parts: Any, state: SharedState) -> None:
    """A retried ADD (the shim lost the answer) is answered from the record:
    nothing is allocated or plumbed again."""
    service, ipam, binding = parts
    first = service.handle(req())
    before = (ipam.list(), set(binding.links))
    ipam.calls.clear()
    assert service.handle(req()) == first
    assert ipam.calls == ["allocate"]          # refused, then read back
    assert (ipam.list(), binding.links) == before
    assert state.cni_failures() == 0


def test_a_replay_proves_nothing_about_faults_or_the_budget(
        parts: Any, state: SharedState) -> None:
    """A replay neither wrote the store nor touched netlink: it clears no
    fault and does not reset the consecutive failure count."""
    service, _, _ = parts
    service.handle(req())
    state.record_cni_failure()
    state.set_fault(Fault.DISK_FULL, True)
    service.handle(req())
    assert state.cni_failures() == 1
    assert state.faults() & Fault.DISK_FULL
    service.handle(req(cid="c2"))              # a fresh ADD does both
    assert state.cni_failures() == 0
    assert not state.faults() & Fault.DISK_FULL


def test_an_abandoned_add_is_rolled_back_under_its_lock(
        parts: Any, tmp_path: Any) -> None:
    """The client left while the ADD ran: it is undone before the lock is
    released, so a retry waiting for the lock makes a fresh one instead of
    being replayed an attachment that is then deleted."""
    service, ipam, binding = parts
    seen: list[bool] = []

    def gone() -> bool:
        # asked with the container's lock still held
        with pytest.raises(errors.Timeout):
            with ContainerLocks(str(tmp_path / "locks")).hold("c1",
                                                               timeout=0.01):
                pass
        seen.append(True)
        return True
    assert service.handle(req(), abandoned=gone) is not None
    assert seen == [True] and ipam.list() == [] and binding.links == set()
    result = service.handle(req())                 # the retry: fresh
    assert ipam.calls[-3:] == ["allocate", "plumb", "plumbed"]
    # a replay whose client left is not undone: the attachment was made
    # (and may have been answered) before
    assert service.handle(req(), abandoned=lambda: True) == result
    assert len(ipam.list()) == 1


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_replay_answers_in_the_replayed_requests_version(
        parts: Any, version: str) -> None:
    service, _, _ = parts
    fresh = service.handle(req(version="1.1.0"))
    replayed = service.handle(req(version=version))
    assert replayed is not None and fresh is not None
    assert replayed["cniVersion"] == version
    assert ("version" in replayed["ips"][0]) == (version < "1.0.0")
    assert ("mtu" in replayed["interfaces"][0]) == (version == "1.1.0")
    for key in ("address", "gateway", "interface"):
        assert replayed["ips"][0][key] == fresh["ips"][0][key]
    assert [(i["name"], i["mac"]) for i in replayed["interfaces"]] == \
        [(i["name"], i["mac"]) for i in fresh["interfaces"]]


def test_volatile_keys_do_not_make_another_request(parts: Any) -> None:
    service, _, _ = parts
    prev = {"cniVersion": "1.1.0", "interfaces": [{"name": "x"}], "ips": []}
    service.handle(req())
    again = service.handle(req(runtimeConfig={"portMappings": []},
                               prevResult=prev))
    assert again is not None
    assert again["interfaces"][0] == {"name": "x"}    # today's prevResult
    assert again["ips"][0]["interface"] == 2


@pytest.mark.parametrize("change", [{"dns": {"nameservers": ["10.0.0.53"]}},
                                    {"name": "othernet"},
                                    {"ipam": {"type": "x"}}])
def test_another_netconf_is_refused_and_changes_nothing(
        parts: Any, state: SharedState, change: dict[str, Any]) -> None:
    service, ipam, binding = parts
    service.handle(req())
    before = (ipam.list(), set(binding.links))
    with pytest.raises(errors.AlreadyExists) as info:
        service.handle(req(extra=change))
    assert info.value.wire.code == 102
    assert (ipam.list(), binding.links) == before
    assert state.cni_failures() == 0


def test_another_netns_is_refused_and_changes_nothing(
        parts: Any, state: SharedState) -> None:
    service, ipam, binding = parts
    service.handle(req())
    before = (ipam.list(), set(binding.links))
    with pytest.raises(errors.AlreadyExists, match="already attached"):
        service.handle(req(netns=OTHER_NETNS))
    assert (ipam.list(), binding.links) == before
    assert state.cni_failures() == 0


def test_an_older_daemons_attachment_is_not_replayed(parts: Any) -> None:
    """A row migrated from schema 0 is plumbed but has no digest or facts."""
    service, ipam, binding = parts
    alloc = ipam.allocate("c1", "eth0", netns=NETNS, pod=PodRef("", "", ""))
    ipam.allocs[("c1", "eth0")] = dataclasses.replace(alloc, state=PLUMBED)
    with pytest.raises(errors.AlreadyExists, match="older"):
        service.handle(req())
    assert ipam.get("c1", "eth0").address == alloc.address


def test_a_half_done_add_is_rolled_back_and_done_afresh(
        parts: Any, state: SharedState) -> None:
    """The Server died between allocating and recording the plumbing: the
    row is pending and a veth may exist. The replayed ADD undoes both."""
    service, ipam, binding = parts
    stale = ipam.allocate("c1", "eth0", netns=NETNS, pod=PodRef("", "", ""))
    binding.links.add(binding.host_ifname("c1", "eth0"))
    ipam.calls.clear()
    result = service.handle(req())
    assert ipam.calls == ["allocate", "unplumb", "release", "allocate",
                          "plumb", "plumbed"]
    assert result is not None
    now = ipam.get("c1", "eth0")
    assert now.state == PLUMBED and now.address != stale.address
    assert result["ips"][0]["address"] == str(now.address)
    assert service.handle(req()) == result        # and it replays from now on
    assert state.cni_failures() == 0


def test_a_half_done_add_in_another_netns_is_left_alone(parts: Any) -> None:
    service, ipam, binding = parts
    stale = ipam.allocate("c1", "eth0", netns=OTHER_NETNS,
                          pod=PodRef("", "", ""))
    binding.links.add(binding.host_ifname("c1", "eth0"))
    with pytest.raises(errors.AlreadyExists):
        service.handle(req())
    assert ipam.list() == [stale]
    assert binding.links == {binding.host_ifname("c1", "eth0")}


def test_failure_to_record_the_plumbing_undoes_it(parts: Any,
                                                  state: SharedState) -> None:
    service, ipam, binding = parts
    ipam.fail_plumbed = errors.IpamStoreError
    with pytest.raises(errors.IpamStoreError):
        service.handle(req())
    assert ipam.calls == ["allocate", "plumb", "plumbed", "unplumb", "release"]
    assert ipam.list() == [] and binding.links == set()
    assert state.cni_failures() == 1


def test_check_of_a_half_done_add_fails(parts: Any) -> None:
    service, ipam, _ = parts
    alloc = ipam.allocate("c1", "eth0", netns=NETNS, pod=PodRef("", "", ""))
    prev = {"cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "sandbox": NETNS}],
            "ips": [{"address": str(alloc.address), "interface": 0}]}
    with pytest.raises(errors.CheckFailed, match="never finished"):
        service.handle(req("CHECK", prevResult=prev))


def test_exhausted_does_not_count(parts: Any, state: SharedState) -> None:
    service, ipam, _ = parts
    ipam.free = []
    with pytest.raises(errors.AddressExhausted):
        service.handle(req())
    assert state.cni_failures() == 0


def test_pod_check_runs_before_allocating(tmp_path: Any, state: SharedState) -> None:
    ipam = FakeIpam()
    seen: list[PodRef] = []

    def gone(pod: PodRef) -> None:
        seen.append(pod)
        raise errors.PodGone("no such pod")

    service = CNIService(lambda: ipam, FakeBinding(ipam),
                         ContainerLocks(str(tmp_path)), state, pod_check=gone)
    with pytest.raises(errors.PodGone):
        service.handle(req())
    assert seen == [PodRef("ns", "p", "u")] and ipam.calls == []
    assert state.cni_failures() == 0


def test_del_unplumbs_then_releases_and_is_idempotent(parts: Any) -> None:
    service, ipam, binding = parts
    service.handle(req())
    ipam.calls.clear()
    assert service.handle(req("DEL")) is None
    assert ipam.calls == ["unplumb", "release"]
    assert service.handle(req("DEL")) is None
    assert ipam.list() == [] and binding.links == set()


def test_check(parts: Any) -> None:
    service, _, binding = parts
    result = service.handle(req())
    assert service.handle(req("CHECK", prevResult=result)) is None
    binding.links.clear()
    with pytest.raises(errors.CheckFailed):
        service.handle(req("CHECK", prevResult=result))
    wrong = dict(result, ips=[dict(result["ips"][0], address="10.1.0.99/24")])
    with pytest.raises(errors.CheckFailed):
        service.handle(req("CHECK", prevResult=wrong))


def test_gc_releases_unlisted_and_removes_leaked_veths(parts: Any) -> None:
    service, ipam, binding = parts
    for cid in ("keep", "drop1", "drop2"):
        service.handle(req(cid=cid))
    binding.links.add("ksvleaked")
    canary = FakeBinding.host_ifname(*CANARY)      # the node's, no pod's
    binding.links.add(canary)
    service.handle(req("GC", extra={"cni.dev/valid-attachments": [
        {"containerID": "keep", "ifname": "eth0"}]}))
    assert [a.container_id for a in ipam.list()] == ["keep"]
    assert binding.links == {FakeBinding.host_ifname("keep", "eth0"), canary}
    assert binding.removed == ["ksvleaked"]


def test_gc_spares_allocations_newer_than_itself(tmp_path: Any) -> None:
    ipam = FakeIpam()
    ipam.created = 5000.0          # after the GC's start (wall clock 1000)
    service = CNIService(lambda: ipam, FakeBinding(ipam),
                         ContainerLocks(str(tmp_path)), None,
                         wall_clock=lambda: 1000.0)
    service.handle(req(cid="inflight"))
    service.handle(req("GC"))
    assert len(ipam.list()) == 1


def test_status(tmp_path: Any, state: SharedState) -> None:
    ipam = FakeIpam()
    subnet: list[ipaddress.IPv4Network | None] = [None]
    lazy = LazyIpam(lambda net: ipam, lambda: subnet[0])
    service = CNIService(lazy, FakeBinding(ipam), ContainerLocks(str(tmp_path)),
                         state)
    with pytest.raises(errors.NotAvailable) as info:
        service.handle(req("STATUS"))
    assert info.value.wire.code == 50
    with pytest.raises(errors.TryAgain) as info:   # ADD before the podCIDR
        service.handle(req())
    assert info.value.wire.code == 11 and state.cni_failures() == 0
    with pytest.raises(errors.NotAvailable, match="pod subnet is not known"):
        service.handle(req("STATUS"))
    subnet[0] = ipaddress.IPv4Network("10.1.0.0/24")
    # STATUS never opens the store itself: the Server's environment watch
    # (or an ADD) does, and STATUS says what that found.
    service.verify_environment(str(tmp_path))
    assert service.handle(req("STATUS")) is None
    state.set_draining()
    with pytest.raises(errors.NotAvailable, match="shutting down"):
        service.handle(req("STATUS"))


@pytest.mark.parametrize(("code", "cls"), [
    (50, errors.NotAvailable), (51, errors.LimitedConnectivity)])
def test_status_says_what_the_checks_published(
        parts: Any, state: SharedState, code: int,
        cls: type[errors.CNIError]) -> None:
    from kuryr_supervisor.state import StatusCause
    service, _, _ = parts
    assert service.handle(req("STATUS")) is None
    state.cni_status.publish(code, StatusCause.FLOWS, "flows: 0 of 3 installed")
    with pytest.raises(cls) as info:
        service.handle(req("STATUS"))
    assert info.value.wire.code == code
    assert info.value.msg == "flows: 0 of 3 installed"
    assert not info.value.wire.counts_as_failure
    state.cni_status.publish(0, StatusCause.NONE, "")
    assert service.handle(req("STATUS")) is None
    state.set_fault(Fault.IPAM_STORE, True)
    with pytest.raises(errors.NotAvailable, match="ipam_store"):
        service.handle(req("STATUS"))


def test_status_never_waits_for_a_dependency(tmp_path: Any,
                                             state: SharedState) -> None:
    """An ADD waiting on the Node's podCIDR (the API hung) holds the lazy
    store's lock; STATUS still answers at once. Before, STATUS opened the
    store itself and waited behind that ADD for the API."""
    import threading
    ipam = FakeIpam()
    hung = threading.Event()
    asked = threading.Event()
    answers: list[BaseException] = []

    def subnet() -> ipaddress.IPv4Network | None:
        asked.set()
        hung.wait()                     # the API does not answer
        return None

    def status() -> None:
        try:
            service.handle(req("STATUS"))
        except errors.CNIError as exc:
            answers.append(exc)
    service = CNIService(LazyIpam(lambda net: ipam, subnet), FakeBinding(ipam),
                         ContainerLocks(str(tmp_path)), state)
    adder = threading.Thread(target=lambda: pytest.raises(
        errors.TryAgain, service.handle, req()))
    adder.start()
    asker = threading.Thread(target=status)
    try:
        assert asked.wait(5)
        asker.start()
        asker.join(5)                   # a deadlock detector, not a timing
        assert not asker.is_alive(), "STATUS waited for the hung API"
        assert isinstance(answers[0], errors.NotAvailable)
    finally:
        hung.set()
        adder.join(10)
        asker.join(10)


def test_busy_container_times_out_without_counting(parts: Any, state: SharedState,
                                                   tmp_path: Any) -> None:
    service, _, _ = parts
    other = ContainerLocks(str(tmp_path / "locks"))
    with other.hold("c1", timeout=1):
        with pytest.raises(errors.Timeout) as info:
            service.handle(req())
    assert info.value.wire.code == 11 and state.cni_failures() == 0
