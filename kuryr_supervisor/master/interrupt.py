"""Ctrl-C (SIGINT) is a graceful stop, as SIGTERM is; a second one is not.

cotyledon's master and workers exit at once on SIGINT (``os._exit(1)``):
requests in flight are cut off and the IPAM store is left unclosed
(``ipam.sqlite-wal``). A terminal sends Ctrl-C to every process of the
daemon, so both halves are needed:

* the master (:meth:`.manager.Manager._on_signal_received`) takes the first
  SIGINT for a SIGTERM and installs :func:`stop_at_once` for the next one,
  which runs even while the master waits in the drain;
* each new worker ignores SIGINT (:func:`ignore_interrupt`, cotyledon's
  ``new_worker`` hook, which runs in the worker after cotyledon's own
  handlers are set): the master drains it with SIGTERM, or exits at the
  second Ctrl-C and the worker leaves with it
  (:func:`kuryr_supervisor.workers.base.exit_with_master`).
"""
from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

LOG = logging.getLogger(__name__)

#: How long the master lets its SIGINT reach the workers before it exits
#: (its own exit closes their pipe: they would end by SIGTERM instead).
SETTLE = 0.1


def ignore_interrupt(*_: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_at_once(signo: int, frame: Any) -> None:
    """The second SIGINT: every process of the group is interrupted and
    the master exits at once (status 1), as cotyledon's own fast exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    LOG.info("second SIGINT: exiting now")
    os.killpg(0, signal.SIGINT)
    time.sleep(SETTLE)
    os._exit(1)


def on_first(sig: int) -> int:
    """The signal the master handles for ``sig``: SIGTERM for the first
    SIGINT (the next one is :func:`stop_at_once`'s)."""
    if sig != signal.SIGINT:
        return sig
    signal.signal(signal.SIGINT, stop_at_once)
    return signal.SIGTERM
