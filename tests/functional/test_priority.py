"""CPU priority: a real daemon's HealthManager runs ahead of the workers it
watches, and a restarted worker gets its nice value again."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon, wait_until

pytestmark = pytest.mark.privileged


def nice_of(pid: int) -> int:
    """The nice value of every thread of ``pid``, which must agree."""
    values = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        values.add(int(fields[16]))  # field 19 of stat(5), counted after comm
    assert len(values) == 1, values
    return values.pop()


def test_health_manager_runs_at_a_lower_nice_value(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, {"supervisor": {"work_nice": 3}}).start()
    try:
        daemon.wait_ready()
        pids = daemon.worker_pids()
        assert nice_of(pids["health"]) == -5
        assert nice_of(pids["server"]) == nice_of(pids["watcher"]) == 3
        assert nice_of(daemon.pid) == 0
        old = pids["server"]
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: daemon.worker_pids()["server"] not in (old, 0), 20)
        assert nice_of(daemon.worker_pids()["server"]) == 3
    finally:
        daemon.close()
