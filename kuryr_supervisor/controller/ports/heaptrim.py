"""Freed heap handed back to the system after a large piece of work.

CPython frees objects into glibc's malloc, which keeps the pages for reuse;
after a one-off peak (the controller's relist of every pod and port) that
memory stays charged to the process though nothing uses it.
"""
from __future__ import annotations

import ctypes
import gc
import logging

LOG = logging.getLogger(__name__)


def give_back() -> None:
    """Return the heap a big relist freed to the system.

    A relist decodes pages of pods and ports, and PodPorts are written from
    several threads (each with a malloc arena of its own); once done, the
    memory is free but glibc keeps it. ``malloc_trim(0)`` (glibc, every
    arena) hands it back: 14 MiB of the handler's 62 at 10,000 pods. Costs
    a few milliseconds, once per relist; elsewhere than glibc, nothing.
    """
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        LOG.debug("malloc_trim unavailable: freed heap stays with the process")
