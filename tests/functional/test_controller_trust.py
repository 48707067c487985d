"""The controller survives Keystone and Neutron: a real controller daemon
against the Kubernetes, Keystone and Neutron fakes over real HTTP.

Fake only: every test injects a fault (a hang, garbage) that a real
Keystone or Neutron cannot be made to show on demand. Which ports the sweep
keeps (another cluster's, another project's), the cluster tag, and a
PodPort that is not proof run against both clouds in
test_controller_clouds.py.

- A Keystone or Neutron that hangs (30 s) or answers 200 with garbage leaves
  the controller live and not ready, the reason named, no worker restarted,
  no handler failure counted.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.controller import Cloud, cloud_fixture, controller_daemon
from tests.fixtures.daemon import Daemon, wait_until

cloud = pytest.fixture(cloud_fixture)


def restarts(d: Daemon) -> dict[str, int]:
    comps = json.loads(d.get("/status")[1])["components"]
    return {name: int(c["restarts"]) for name, c in comps.items()}


def not_ready(d: Daemon) -> tuple[int, str] | None:
    try:
        code, body = d.get("/ready?verbose")
    except OSError:                    # not listening yet
        return None
    return (code, body) if code != 200 else None


@pytest.fixture
def controller(tmp_path: Path, cloud: Cloud) -> Iterator[Daemon]:
    d = controller_daemon(tmp_path, cloud, {
        "supervisor": {"handler_deadline": 3.0, "health_deadline": 4.0}})
    yield d
    d.close()


def hold_live_not_ready(d: Daemon, name: str, words: str,
                        seconds: float) -> str:
    """For ``seconds``: /alive 200, /ready 503 naming ``name`` (within
    15 s: a first check still waiting on its dependency says "not checked
    yet" until its deadline)."""
    def named() -> tuple[int, str] | None:
        got = not_ready(d)
        return got if got and f"[-]{name} failed" in got[1] \
            and words in got[1] else None
    try:
        _, body = wait_until(named, 15)
    except TimeoutError:
        raise AssertionError(not_ready(d)) from None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert d.probe("/alive") == 200
        time.sleep(0.25)
    return body


@pytest.mark.parametrize("fault", ["hang", "garbage"])
def test_keystone_fault_live_not_ready(controller: Daemon, cloud: Cloud,
                                       fault: str) -> None:
    """No token yet and Keystone hangs 30 s (or answers garbage): every
    deadline is shorter than the heartbeat deadlines, so nothing goes
    stale; readiness names Keystone."""
    if fault == "hang":
        cloud.keystone.hang = 30.0
    else:
        cloud.keystone.garbage = True
    cloud.api.add_pod("default", "waiting", "node-a")
    controller.start()
    body = hold_live_not_ready(controller, "keystone",
                               "no answer within" if fault == "hang"
                               else "Keystone", 12.0)
    print(body)
    assert set(restarts(controller).values()) == {0}
    assert controller.status()["handlerFailures"] == 0
    cloud.keystone.hang, cloud.keystone.garbage = 0.0, False
    controller.wait_ready(40)
    wait_until(lambda: cloud.podport("default", "waiting"), 40)
    assert set(restarts(controller).values()) == {0}


@pytest.mark.parametrize("fault", ["hang", "garbage"])
def test_neutron_fault_live_not_ready(controller: Daemon, cloud: Cloud,
                                      fault: str) -> None:
    controller.start()
    controller.wait_ready()
    if fault == "hang":
        cloud.neutron.hang = 30.0
    else:
        cloud.neutron.garbage = True
    cloud.api.add_pod("default", "waiting", "node-a")
    hold_live_not_ready(controller, "neutron",
                        "no answer within" if fault == "hang" else "not JSON",
                        12.0)
    assert cloud.podport("default", "waiting") is None
    assert set(restarts(controller).values()) == {0}
    assert controller.status()["handlerFailures"] == 0
    cloud.neutron.hang, cloud.neutron.garbage = 0.0, False
    controller.wait_ready(40)
    wait_until(lambda: cloud.podport("default", "waiting"), 40)
