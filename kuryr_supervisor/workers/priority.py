"""CPU priority of each worker: the HealthManager ahead of the work it
watches.

Why: a probe is a few hundred microseconds of CPU, but during a burst of
pod starts every core is busy with the Server's requests and the runtime's
shim processes, and a probe that waits its turn in the run queue behind
them can take tens of milliseconds (the probes benchmark measured 56-76 ms
p99 under a 50-pod burst). A lower nice value lets the scheduler run the
HealthManager as soon as a probe arrives. Inside the daemon's own cgroup
(a pod, a systemd unit) its competitors are the other workers, so raising
their nice value (no privilege needed) is enough there; against processes
outside the cgroup the cgroup's CPU weight decides (``CPUWeight=`` in the
unit, CPU requests in the DaemonSet: the docs, CPU priority and memory).

Set once, by the worker itself at start (``setpriority`` on each of its
threads):
the master keeps the default, so a restarted worker starts from it again.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.state import WorkerKind

LOG = logging.getLogger(__name__)

SetNice = Callable[[int], None]


def _set_own_nice(value: int) -> None:
    """Every thread of this process: Linux keeps a nice value per thread
    (cotyledon runs ``run()`` in a thread of its own), and a new thread
    takes its creator's."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), value)
        except ProcessLookupError:      # that thread just ended
            continue


def nice_for(kind: WorkerKind, conf: cfg.ConfigOpts) -> int:
    """The configured nice value of a worker of ``kind``."""
    opts = conf.supervisor
    return int(opts.health_nice if kind is WorkerKind.HEALTH
               else opts.work_nice)


def apply(kind: WorkerKind, conf: cfg.ConfigOpts, *,
          set_nice: SetNice = _set_own_nice,
          current: Callable[[], int] = lambda: os.getpriority(
              os.PRIO_PROCESS, 0)) -> bool:
    """Give this process its kind's nice value; False when not permitted
    (lowering it needs CAP_SYS_NICE), logged once per process start."""
    wanted = nice_for(kind, conf)
    if wanted == current():
        return True
    try:
        set_nice(wanted)
    except OSError as exc:
        LOG.warning("%s: cannot set nice %d (%s); it keeps nice %d. Without "
                    "CAP_SYS_NICE raise [supervisor] work_nice instead",
                    kind.value, wanted, exc.strerror, current())
        return False
    LOG.debug("%s runs at nice %d", kind.value, wanted)
    return True
