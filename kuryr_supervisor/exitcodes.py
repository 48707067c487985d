"""The master's exit statuses, one per cause; a crash is never reported as 0.

This table is the documentation: doc/source/admin/signals.rst lists the same values.
"""
from __future__ import annotations

import enum

from kuryr_supervisor.state import LiveCause


class ExitCode(enum.IntEnum):
    OK = 0                  # graceful stop (SIGTERM) completed in time
    FAST_EXIT = 1           # a second SIGINT, or graceful_shutdown_timeout exceeded
    USAGE = 2               # an unknown subcommand or option (as argparse)
    CONFIG = 78             # invalid configuration or command line (EX_CONFIG),
    #                         or a port/socket path held by another process
    #                         (the line names its pid and uid)
    RESTART_BUDGET = 70     # more than max_restarts worker restarts in restart_window
    CNI_FAILURES = 71       # cni_failures_count consecutive internal ADD failures
    MEMORY = 72             # daemon memory above max_memory_usage
    NETLINK = 73            # netlink unusable
    CHECKER_STALE = 74      # the HealthManager's checks stopped running
    ORPHANED = 75           # (worker) the master died; the worker left at once
    HANDLER_FAILURES = 76   # (controller) handler_failures_count consecutive failures
    ALREADY_RUNNING = 77    # another daemon holds the state dir's lock (only then)


#: Under ``worker_death_policy = exit``, the status for each liveness cause.
#: COMPONENT is absent: a dead or stale worker is restarted, and only the
#: restart budget running out ends the daemon.
EXIT_FOR_CAUSE: dict[LiveCause, ExitCode] = {
    LiveCause.RESTART_BUDGET: ExitCode.RESTART_BUDGET,
    LiveCause.CNI_FAILURES: ExitCode.CNI_FAILURES,
    LiveCause.MEMORY: ExitCode.MEMORY,
    LiveCause.NETLINK: ExitCode.NETLINK,
    LiveCause.CHECKER_STALE: ExitCode.CHECKER_STALE,
    LiveCause.HANDLER_FAILURES: ExitCode.HANDLER_FAILURES,
}
