"""When the network_policy handler passes (tests/fixtures/policyhandler.py
runs it whole): a Neutron that does not answer is asked again with
backoff (1 s doubling to ``retry_max``), never at every change of the
book nor at every tick of the loop, and what the book said meanwhile is
passed once it answers; an API that fails the cluster's names' read
(kube-system) likewise."""
from __future__ import annotations

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.openstack.wire import OpenStackUnavailable
from kuryr_supervisor.controller.policy import book as books
from kuryr_supervisor.controller.policy.naming import Naming
from kuryr_supervisor.controller.policy.reconcile import GLANCE, Reconciler
from kuryr_supervisor.controller.policy.report import PolicyReport
from kuryr_supervisor.kubernetes import client as k8s


class Down:
    """A Neutron that does not answer: every call counted, refused."""

    def __init__(self) -> None:
        self.calls = 0

    def policy_groups(self, *args: object) -> list[object]:
        self.calls += 1
        raise OpenStackUnavailable("Neutron GET /v2.0/security-groups: "
                                   "connection refused")


class Recorder:
    def __init__(self) -> None:
        self.notes: list[object] = []

    def record(self, note: object) -> None:
        self.notes.append(note)


def _names() -> Naming:
    return Naming("kuryr-supervisor:test")


def _reconciler(api: object, clock: list[float],
                naming: object = _names
                ) -> tuple[Reconciler, books.PolicyBook]:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    conf.set_override("retry_max", 4.0, "network_policy")
    book = books.PolicyBook()
    for kind in books.KINDS:
        book.replace(kind, [])
    book.upsert("NetworkPolicy", books.decode_policy({
        "metadata": {"uid": "u1", "namespace": "a", "name": "p"},
        "spec": {"podSelector": {}}}))
    report = PolicyReport(Recorder(), None)    # type: ignore[arg-type]
    return Reconciler(conf, book=book, api=api,
                      naming=naming,  # type: ignore[arg-type]
                      report=report,
                      network_id="net", clock=lambda: clock[0]), book


def test_an_outage_is_asked_again_with_backoff_not_at_every_change() -> None:
    api, clock = Down(), [100.0]
    rec, book = _reconciler(api, clock)
    rec.step()
    assert api.calls == 1 and rec.ready
    assert rec.wake_in() == pytest.approx(1.0)
    book.upsert("Namespace", books.decode_namespace({"metadata": {
        "name": "a", "uid": "n"}}))
    clock[0] += 0.5
    rec.step()                                      # a change: it waits
    assert api.calls == 1 and rec.wake_in() == pytest.approx(0.5)
    waits = []
    for _ in range(4):
        clock[0] = rec.retry_at or clock[0]
        rec.step()
        waits.append(rec.wake_in())
    assert api.calls == 5
    assert waits == [pytest.approx(w) for w in (2.0, 4.0, 4.0, 4.0)]
    notes = rec.report.recorder.notes               # type: ignore[attr-defined]
    assert [n.reason for n in notes] == ["PolicyPending"]  # once


def test_an_api_that_fails_the_names_read_is_asked_again_with_backoff(
        ) -> None:
    calls, clock = [], [100.0]

    def naming() -> Naming:
        calls.append(clock[0])
        raise k8s.K8sTemporary("the API server does not answer")
    rec, _ = _reconciler(Down(), clock, naming)
    with pytest.raises(k8s.K8sError):
        rec.step()
    assert rec.wake_in() == pytest.approx(1.0)
    rec.step()
    assert len(calls) == 1
    clock[0] += 1.0
    with pytest.raises(k8s.K8sError):
        rec.step()
    assert len(calls) == 2 and rec.wake_in() > GLANCE
