"""The port handler's failure policy on its own, with an injected clock:
outages wait and back off uncounted, a PodPort conflict is retried, other
API refusals are left, anything else is retried and counted; a release
counts only what is neither an outage nor a refusal."""
from __future__ import annotations

import pytest

from kuryr_supervisor.controller.handlers import HandlerContext
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.ports.book import PodRecord
from kuryr_supervisor.controller.ports.retry import RETRY_MAX, RETRY_MIN, Retries
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.clusterpods import ClusterPod
from tests.unit.test_neutronport import Counts

PODS = {u: PodRecord(u, "ns", u) for u in ("a", "b", "c")}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def retries() -> tuple[Retries, Counts, Clock]:
    counts, clock = Counts(), Clock()
    ctx = HandlerContext(None, counts, lambda ready: None,  # type: ignore[arg-type]
                         component="handler:neutron_port")  # type: ignore[arg-type]
    return Retries(ctx, clock=clock), counts, clock


def test_outage_waits_uncounted_and_backs_off() -> None:
    r, counts, clock = retries()
    r.failed(["a", "gone"], osa.OpenStackUnavailable("Neutron: 503"), PODS)
    assert r.pending == {"a"} and counts.total == 0
    assert not r.due(clock.now) and r.due(clock.now + RETRY_MIN)
    delays = []
    for _ in range(8):                     # rounds that leave "a" waiting
        clock.now = r.at
        r.tried()
        delays.append(r.at - clock.now)
    assert delays[:3] == [2 * RETRY_MIN, 4 * RETRY_MIN, 8 * RETRY_MIN]
    assert delays[-1] == RETRY_MAX
    r.succeeded("a")
    r.tried()                              # none waits: back to the start
    assert not r.pending and r.at - clock.now == RETRY_MIN


@pytest.mark.parametrize(("exc", "pending", "counted"), [
    (k8s.K8sTemporary("API: timeout"), {"a"}, 0),
    (osa.QuotaExceeded("quota", 409), {"a"}, 0),
    (k8s.K8sPermanent("conflict", 409), {"a"}, 0),
    (k8s.K8sPermanent("forbidden", 403), set(), 0),
    (ValueError("port has no IPv4 address"), {"a"}, 1),
])
def test_what_a_failure_costs(exc: Exception, pending: set[str],
                              counted: int) -> None:
    r, counts, _ = retries()
    r.pending.add("a")
    r.failed(["a"], exc, PODS)
    assert r.pending == pending and counts.total == counted


def test_success_resets_the_count() -> None:
    r, counts, _ = retries()
    r.failed(["a", "b"], RuntimeError("bug"), PODS)
    assert counts.failures == 2
    r.succeeded("a")
    assert counts.failures == 0 and r.pending == {"b"}


@pytest.mark.parametrize(("exc", "counted"), [
    (None, 0),
    (osa.OpenStackUnavailable("Neutron: timeout"), 0),
    (k8s.K8sPermanent("forbidden", 403), 0),
    (RuntimeError("bug"), 1),
])
def test_release(exc: Exception | None, counted: int) -> None:
    r, counts, _ = retries()
    r.failed(["a"], RuntimeError("bug"), PODS)     # one failure before
    pod = ClusterPod("ns", "gone", "g", "node-a", False, None, "Running")
    calls = []

    def release() -> None:
        calls.append(pod.uid)
        if exc is not None:
            raise exc

    assert r.release(pod.namespace, pod.name, release) is (exc is None)
    assert calls == ["g"]
    # a success resets the count; an outage or refusal leaves it as it was
    assert counts.failures == (0 if exc is None else 1 + counted)
    assert counts.total == 1 + counted
