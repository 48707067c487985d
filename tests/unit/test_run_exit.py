"""A test run ends when its tests do: a thread a test leaves running makes
the run fail within the exit's grace, naming the thread's stack, instead
of holding the interpreter's exit until CI's deadline
(``tests/conftest.py``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LEAKY = '''
import concurrent.futures
import threading

never = threading.Event()


def test_leaves_a_job_running() -> None:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.submit(never.wait)
'''

CLEAN = '''
def test_nothing_left() -> None:
    assert True
'''


def run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_probe.py"
    test.write_text(body)
    env = dict(os.environ, KURYR_SUPERVISOR_TEST_EXIT_GRACE="2")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "tests.conftest", "--rootdir", str(tmp_path), str(test)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_thread_left_running_fails_the_run_naming_it(tmp_path: Path) -> None:
    done = run(tmp_path, LEAKY)
    assert "1 passed" in done.stdout
    assert done.returncode == 3, done.stdout + done.stderr
    assert "a thread a test left running holds the interpreter's exit" in \
        done.stderr
    assert "_worker" in done.stderr        # the executor's thread, its stack


def test_a_clean_run_exits_at_once(tmp_path: Path) -> None:
    done = run(tmp_path, CLEAN)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "holds the interpreter's exit" not in done.stderr
