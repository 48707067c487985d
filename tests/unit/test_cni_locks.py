"""Per-container flock locks: threads, processes, timeouts, file hygiene."""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni.locks import ContainerLocks


def test_same_container_is_serialised_across_threads(tmp_path: Path) -> None:
    locks = ContainerLocks(str(tmp_path))
    inside, peak = [0], [0]
    guard = threading.Lock()

    def worker() -> None:
        with locks.hold("c1", timeout=10, remove=True):
            with guard:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.005)
            with guard:
                inside[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1
    assert os.listdir(tmp_path) == []


def test_different_containers_run_in_parallel(tmp_path: Path) -> None:
    locks = ContainerLocks(str(tmp_path))
    with locks.hold("a", timeout=1), locks.hold("b", timeout=1):
        pass


def _hold_in_child(directory: str, ready: multiprocessing.synchronize.Event,
                   release: multiprocessing.synchronize.Event) -> None:
    with ContainerLocks(directory).hold("c1", timeout=5):
        ready.set()
        release.wait(10)


def test_other_process_holder_blocks_until_timeout(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_in_child,
                        args=(str(tmp_path), ready, release))
    child.start()
    try:
        assert ready.wait(5)
        with pytest.raises(errors.Timeout):
            with ContainerLocks(str(tmp_path)).hold("c1", timeout=0.1):
                pass
    finally:
        release.set()
        child.join(5)
    with ContainerLocks(str(tmp_path)).hold("c1", timeout=1):
        pass


def test_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_in_child,
                        args=(str(tmp_path), ready, release))
    child.start()
    assert ready.wait(5)
    child.kill()
    child.join(5)
    with ContainerLocks(str(tmp_path)).hold("c1", timeout=1):
        pass


def test_failed_first_use_leaves_no_file(tmp_path: Path) -> None:
    locks = ContainerLocks(str(tmp_path))
    with locks.hold("c1", timeout=1) as held:
        assert held.created
        held.remove = held.created
    assert os.listdir(tmp_path) == []
    with locks.hold("c2", timeout=1):
        pass
    with locks.hold("c2", timeout=1) as held:
        assert not held.created
    assert os.listdir(tmp_path) == ["c2.lock"]
    assert os.stat(tmp_path / "c2.lock").st_mode & 0o777 == 0o600
