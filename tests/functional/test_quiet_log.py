"""A healthy daemon's log is clean, in both roles, through a normal life:
no line at ERROR or CRITICAL, no traceback, no unknown option.

Real daemons with ``debug`` on (oslo.log prints a traceback logged at any
level, DEBUG included, as lines at ERROR), against the Kubernetes API fake
and, for the controller, the Keystone and Neutron fakes logged into with a
full ``password`` login. Their watches last a second (``watch_timeout``),
so the API ends several of them and they are closed and opened again. The
CNI role in Kubernetes mode is started, stopped and started again on the
same state; two controller replicas hand the lead over when the leader
stops. Every stop is graceful and exits 0.
"""
from __future__ import annotations

import ipaddress
import random
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.controller import Cloud, controller_daemon, start_cloud
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.leader import LEASE
from tests.fixtures.leader import leads as leads_api

NODE = "node-quiet"
#: What a healthy daemon never logs.
LOUD = re.compile(r" (ERROR|CRITICAL) |Traceback|unknown (option|group)")
#: The lease of the controller replicas (seconds).
DURATION = 3


def loud_lines(d: Daemon) -> list[str]:
    text = d.log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if LOUD.search(line)]


def watches_since(api: FakeAPI, since: float) -> int:
    """Watch requests the API was sent since ``since`` (monotonic)."""
    return sum(1 for t, _, _, q in list(api.requests)
               if t >= since and q.get("watch") == "true")


def stop(d: Daemon) -> None:
    d.signal(signal.SIGTERM)
    assert d.wait_exit(20) == 0, d.log()


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


@pytest.mark.privileged
def test_cni_role_in_kubernetes_mode(tmp_path: Path, api: FakeAPI) -> None:
    cidr = ipaddress.IPv4Network(f"10.{random.randrange(200, 250)}."
                                 f"{random.randrange(256)}.0/24")
    api.add_node(NODE, pod_cidr=str(cidr))
    api.add_pod("default", "web", NODE)
    d = Daemon(tmp_path, {
        "DEFAULT": {"debug": True},
        "kubernetes": {"api_root": api.url, "node_name": NODE,
                       "request_timeout": 1.0, "watch_timeout": 1,
                       "api_check_interval": 0.2, "api_check_timeout": 0.5},
        "watcher": {"backoff_max": 0.5}})
    try:
        for life in range(2):           # a start, then a restart
            since = time.monotonic()
            d.start()
            d.wait_ready(30)
            api.add_pod("default", f"p{life}", NODE)
            api.modify_pod("default", f"p{life}", labels={"x": "y"})
            api.delete_pod("default", f"p{life}")
            wait_until(lambda since=since: watches_since(api, since) >= 3, 15)
            stop(d)
    finally:
        d.close()
    assert loud_lines(d) == []


def test_controller_replicas_through_a_handover(tmp_path: Path) -> None:
    cloud: Cloud = start_cloud()
    options = {"DEFAULT": {"debug": True},
               "kubernetes": {"watch_timeout": 1},
               "controller": {"leader_election": True,
                              "lease_duration": DURATION,
                              "lease_namespace": LEASE[0]}}
    first, second = (controller_daemon(tmp_path / name, cloud, options)
                     for name in ("a", "b"))
    try:
        first.start()
        first.wait_ready(30)
        wait_until(lambda: leads_api(cloud.api, first), 15)
        second.start()
        second.wait_ready(30)
        since = time.monotonic()
        cloud.api.add_pod("ns", "a0", "node-a")
        wait_until(lambda: cloud.podport("ns", "a0"), 15)
        wait_until(lambda: watches_since(cloud.api, since) >= 4, 15)
        stop(first)                     # the handover
        wait_until(lambda: leads_api(cloud.api, second), DURATION + 10)
        since = time.monotonic()
        cloud.api.add_pod("ns", "b0", "node-a")
        wait_until(lambda: cloud.podport("ns", "b0"), 15)
        wait_until(lambda: watches_since(cloud.api, since) >= 3, 15)
        stop(second)
    finally:
        first.close()
        second.close()
        cloud.stop()
    assert loud_lines(first) == []
    assert loud_lines(second) == []
