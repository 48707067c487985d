"""What the network_policy handler's board shows: the ``network-policy``
readiness check naming Neutron, the figures on ``/metrics`` only where
that handler runs, and the count pending in ``kuryr-supervisor status``."""
from __future__ import annotations

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.cli import status
from kuryr_supervisor.health.checks.controller import (
    NetworkPolicyCheck,
    controller_checks,
)
from kuryr_supervisor.state import CNI_COMPONENTS, SharedState
from kuryr_supervisor.state.components import controller_components
from tests.unit.test_metrics import build, scrape

PREFIX = "kuryr_supervisor_network_polic"


def _names(state: SharedState) -> list[str]:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    return [c.name for c in controller_checks(state, conf, 1)]


def test_readiness_names_neutron_while_it_is_down_or_refusing() -> None:
    state, _, _, _ = build(controller_components(
        ["neutron_port", "network_policy"]))
    assert "network-policy" in _names(state)
    check, board = NetworkPolicyCheck(state), state.policies
    board.gauges({"applied": 2, "pending": 1})
    assert check.run(0.0).ok
    board.neutron("down")
    result = check.run(0.0)
    assert not result.ok and "Neutron does not answer" in result.message
    assert "1 NetworkPolicies wait" in result.message
    board.neutron("refusing")
    result = check.run(0.0)
    assert not result.ok and "Neutron refuses" in result.message
    board.neutron("ok")
    assert check.run(0.0).ok
    # Where the handler does not run, no such check.
    other, _, _, _ = build(controller_components(["neutron_port"]))
    assert "network-policy" not in _names(other)


def test_figures_only_where_the_handler_runs() -> None:
    state, _, exporter, _ = build(controller_components(["network_policy"]))
    board = state.policies
    board.gauges({"applied": 3, "pending": 1, "failed": 2})
    board.wrote("rule", 4)
    board.wrote("unknown-kind")
    board.refused()
    got = scrape(exporter)
    assert got[("kuryr_supervisor_network_policies",
                (("state", "applied"),))] == 3
    assert got[("kuryr_supervisor_network_policies",
                (("state", "failed"),))] == 2
    assert got[("kuryr_supervisor_network_policy_neutron_writes_total",
                (("kind", "rule"),))] == 4
    assert got[("kuryr_supervisor_network_policy_neutron_refusals_total",
                ())] == 1
    assert got[("kuryr_supervisor_network_policy_neutron_up", ())] == 1
    for active in (controller_components(["neutron_port"]), CNI_COMPONENTS):
        _, _, other, _ = build(active)
        assert not [k for k in scrape(other) if k[0].startswith(PREFIX)]


def test_status_shows_the_count_pending() -> None:
    doc = {"version": "1", "live": True, "ready": True, "summary": "ok",
           "components": {}, "checks": {},
           "policies": {"applied": 5, "pending": 2, "failed": 1,
                        "neutron": "refusing"}}
    text = status.render(doc)
    assert "Policies: 2 pending, 1 failed, 5 applied (Neutron refusing)" \
        in text
    assert "Policies" not in status.render(dict(doc, policies=None))
