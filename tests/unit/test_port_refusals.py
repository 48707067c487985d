"""Neutron refusals a restart cannot fix are outages, not handler faults:
the pod network deleted (404 ``NetworkNotFound``), the pod subnet deleted
(404 ``SubnetNotFound``), every create forbidden after a role change (403).
The pods wait and are tried again, each gets a Warning Event naming what
is missing, the controller is not ready naming Neutron and what is
missing, liveness is untouched (nothing counted against
``handler_failures_count``), and a burst is not tried port by port. The
``neutron`` readiness check says at start whether the pod network and
subnet exist. In this process, against the fakes."""
from __future__ import annotations

from pathlib import Path

import pytest

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.health.checks.controller import NeutronPortsCheck
from kuryr_supervisor.master.roles.dependencies import NeutronCheck
from kuryr_supervisor.state import Fault
from tests.unit.test_neutronport import World
from tests.unit.test_port_retry_safety import make_world, start, stop


class Faults:
    """Stands in for the shared state's fault and mode bits (the checks
    read them)."""

    def __init__(self, bits: Fault, modes: object = None) -> None:
        self.bits, self.mode_bits = bits, modes

    def faults(self) -> Fault:
        return self.bits

    def modes(self) -> object:
        return self.mode_bits


def refuse(w: World, what: str) -> None:
    if what == "network":
        w.neutron.networks.discard(w.neutron.network_id)
    elif what == "subnet":
        w.neutron.subnet_gone = True
    else:
        w.neutron.forbid_creates = True


@pytest.mark.parametrize("what,words", [
    ("network", "network"), ("subnet", "subnet"), ("policy", "forbid")])
def test_a_refusal_no_restart_fixes_is_an_outage(
        tmp_path: Path, what: str, words: str) -> None:
    w = make_world(tmp_path)
    try:
        refuse(w, what)
        pods = w.add(5)
        handler = start(w, pods)
        for _ in range(3):                         # retried, with backoff
            handler.retries.at = 0.0
            handler.tick()
        assert w.counts.total == 0, "counted against the failure budget"
        assert handler.retries.pending == {p["metadata"]["uid"] for p in pods}
        posts = w.neutron.counts()["POST /v2.0/ports"]
        assert posts <= 4, f"{posts} creates: tried port by port"
        counts = w.counts
        result = NeutronPortsCheck(Faults(counts.fault_bits,  # type: ignore[attr-defined]
                                          counts.mode_bits),  # type: ignore[attr-defined]
                                   w.conf).run(0.0)  # type: ignore[arg-type]
        assert not result.ok and "Neutron" in result.message
        assert words in result.message.lower(), result.message
        events = sorted((e["involvedObject"]["name"], e["type"])
                        for e in w.api.core_events.values())
        assert events == sorted((p["metadata"]["name"], "Warning")
                                for p in pods)
        refuse_undone(w, what)
        handler.retries.at = 0.0
        handler.tick()
        assert w.ported(pods) and w.counts.total == 0
        counts = w.counts
        ok = NeutronPortsCheck(Faults(counts.fault_bits,  # type: ignore[attr-defined]
                                      counts.mode_bits),  # type: ignore[attr-defined]
                               w.conf).run(0.0)  # type: ignore[arg-type]
        assert ok.ok, ok.message
    finally:
        stop(w)


def refuse_undone(w: World, what: str) -> None:
    w.neutron.networks.add(w.neutron.network_id)
    w.neutron.subnet_gone = w.neutron.forbid_creates = False


@pytest.mark.parametrize("what", ["network", "subnet"])
def test_the_neutron_check_says_whether_network_and_subnet_exist(
        tmp_path: Path, what: str) -> None:
    w = make_world(tmp_path)
    try:
        cloud = osa.OpenStack.from_conf(w.conf)
        opts = w.conf.controller
        check = NeutronCheck(cloud, lambda: "", lambda: 0.0,
                             network_id=opts.pod_network_id,
                             subnet_id=opts.pod_subnet_id)
        assert check.run(0.0).ok
        refuse(w, what)
        result = check.run(1.0)
        assert not result.ok
        wanted = opts.pod_network_id if what == "network" else \
            opts.pod_subnet_id
        assert wanted in result.message and what in result.message
    finally:
        stop(w)
