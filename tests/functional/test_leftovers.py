"""The suite's own hygiene: what a killed test run leaves is deleted by the
next one's start. A process records a namespace with a veth whose host end
stays in the root namespace, then dies without its teardown, as a
SIGKILLed run does; the sweep deletes that namespace (and with it the host
end, whose name a later test could ask for again) and keeps those of a
live process."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fixtures.daemon import wait_until
from tests.fixtures.netns import add_netns, ip, link_names, sweep_leftovers, unique

pytestmark = pytest.mark.privileged

LEAVE = """
import sys
from tests.fixtures.netns import add_netns, ip
ns, host = sys.argv[1], sys.argv[2]
add_netns(ns)
ip("link", "add", host, "type", "veth", "peer", "name", "inner", "netns", ns)
"""


def test_a_killed_runs_namespaces_are_swept_a_live_ones_kept() -> None:
    dead_ns, host = unique("ksvt-"), unique("ksvtv")
    subprocess.run([sys.executable, "-c", LEAVE, dead_ns, host], check=True)
    live_ns = unique("ksvt-")
    add_netns(live_ns)           # this process: alive
    try:
        assert host in link_names()
        swept = sweep_leftovers()
        assert dead_ns in swept and live_ns not in swept, swept
        # The kernel tears a deleted namespace down on a work queue of its
        # own, its veths with it: a moment later on a loaded machine.
        wait_until(lambda: host not in link_names(), 10)
        assert ip("netns", "pids", live_ns, check=False).returncode == 0
        assert ip("netns", "pids", dead_ns, check=False).returncode != 0
    finally:
        ip("netns", "del", dead_ns, check=False)
        ip("netns", "del", live_ns, check=False)
