"""Budget and lifecycle checks on a real SharedState."""
from __future__ import annotations

import multiprocessing

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks.base import Kind
from kuryr_supervisor.health.checks.budgets import (
    CheckerCheck,
    CNIFailuresCheck,
    DrainingCheck,
    RestartBudgetCheck,
    ServerCapacityCheck,
)
from kuryr_supervisor.state import LiveCause, SharedState


@pytest.fixture
def state() -> SharedState:
    return SharedState.create(multiprocessing.get_context("fork"))


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    return conf


def test_cni_failures_reach_the_limit(state: SharedState,
                                      conf: cfg.ConfigOpts) -> None:
    check = CNIFailuresCheck(state, conf)
    assert check.cause is LiveCause.CNI_FAILURES
    state.record_cni_failure()
    state.record_cni_failure()
    assert check.run(0.0).ok
    state.record_cni_failure()
    result = check.run(0.0)
    assert not result.ok
    assert result.message == "3 consecutive CNI ADD failures (limit 3)"
    state.record_cni_success()
    assert check.run(0.0).ok


def test_cni_failures_limit_is_mutable(state: SharedState,
                                       conf: cfg.ConfigOpts) -> None:
    check = CNIFailuresCheck(state, conf)
    for _ in range(3):
        state.record_cni_failure()
    conf.set_override("cni_failures_count", 5, group="cni_daemon")
    assert check.run(0.0).ok


def test_restart_budget(state: SharedState, conf: cfg.ConfigOpts) -> None:
    check = RestartBudgetCheck(state, conf)
    assert check.run(0.0).ok
    state.set_restart_budget_exceeded(True)
    result = check.run(0.0)
    assert not result.ok
    assert result.message == ("restart budget exceeded: more than 5 worker "
                              "restarts within 300s")


@pytest.mark.parametrize("inflight,capacity,ok", [
    (0, 0, True), (5, 0, True), (63, 64, True), (64, 64, False),
    (65, 64, False)])
def test_server_capacity(state: SharedState, inflight: int, capacity: int,
                         ok: bool) -> None:
    state.set_server_load(inflight, capacity)
    result = ServerCapacityCheck(state).run(0.0)
    assert result.ok is ok
    if not ok:
        assert result.message == (f"server saturated: {inflight}/{capacity} "
                                  "in flight")


def test_draining(state: SharedState) -> None:
    check = DrainingCheck(state)
    assert check.kind is Kind.READINESS
    assert check.run(0.0).ok
    state.set_draining()
    assert not check.run(0.0).ok


def test_checker_staleness(conf: cfg.ConfigOpts) -> None:
    check = CheckerCheck(conf, lambda: 100.0)
    assert check.run(110.0).ok
    result = check.run(110.5)
    assert not result.ok
    assert result.message == ("checker stale: checks last ran 10.5s ago "
                              "(deadline 10s)")
    conf.set_override("checker_deadline", 20.0, group="health")
    assert check.run(110.5).ok
