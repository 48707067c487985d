"""Release IP allocations whose owner is gone (the same path as CNI GC).

An allocation leaks when its pod is deleted while the daemon is down, or
when a shim is killed mid-ADD and no DEL follows. The Watcher reconciles:

* Kubernetes mode: an allocation naming a pod is released when that pod
  is not in the (synced) registry, or has another UID, *and* the API
  confirms it is gone (``confirm_gone``) -- the registry may lag behind a
  kubelet that just started the pod;
* standalone mode, and allocations naming no pod: released when their
  netns path no longer exists.

Invariants: nothing is released from a registry that never completed a
list (the caller only runs this once synced); nothing is released on the
registry's word alone when the API cannot confirm it (the pass stops, to
be retried, rather than wait out a timeout per allocation); a failing
release is logged and retried on the next pass; one bad allocation never
stops the pass.
Allocations are read and released only through the injected callables.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kuryr_supervisor.kubernetes.registry import Pod, PodRefLike

LOG = logging.getLogger(__name__)


class AllocationLike(Protocol):
    """An IP allocation (``ipam.Allocation`` fits)."""

    @property
    def container_id(self) -> str: ...
    @property
    def ifname(self) -> str: ...
    @property
    def netns(self) -> str: ...
    @property
    def pod(self) -> Any: ...   # a PodRefLike, or None outside Kubernetes


ListAllocations = Callable[[], Iterable[AllocationLike]]
Release = Callable[[AllocationLike], None]
LookupPod = Callable[[str, str], "Pod | None"]
ConfirmGone = Callable[[PodRefLike], bool]


class _ApiUnavailable(Exception):
    """The API could not confirm a pod is gone: stop this pass early."""


def netns_exists(path: str) -> bool:
    return os.path.exists(path)


class Reclaimer:
    """One reconciliation pass per :meth:`reconcile` call."""

    def __init__(self, list_allocations: ListAllocations, release: Release,
                 *, lookup_pod: LookupPod | None = None,
                 confirm_gone: ConfirmGone | None = None,
                 netns_exists: Callable[[str], bool] = netns_exists,
                 heartbeat: Callable[[], None] = lambda: None) -> None:
        """``lookup_pod`` (the registry's ``get``) selects Kubernetes mode;
        None is standalone mode. ``heartbeat`` is called between
        allocations: a long pass must not make the worker look hung."""
        self._heartbeat = heartbeat
        self._list = list_allocations
        self._release = release
        self._lookup_pod = lookup_pod
        self._confirm_gone = confirm_gone
        self._netns_exists = netns_exists

    def is_orphan(self, alloc: AllocationLike) -> bool:
        pod = getattr(alloc, "pod", None)
        if self._lookup_pod is not None and pod is not None and pod.name:
            known = self._lookup_pod(pod.namespace, pod.name)
            if known is not None and (not pod.uid or known.uid == pod.uid):
                return False
            if self._confirm_gone is None:
                return True
            try:
                return self._confirm_gone(pod)
            except Exception as exc:
                raise _ApiUnavailable(str(exc)) from exc
        return bool(alloc.netns) and not self._netns_exists(alloc.netns)

    def reconcile(self) -> list[AllocationLike]:
        """Release every orphaned allocation; returns those released."""
        released: list[AllocationLike] = []
        try:
            allocations = list(self._list())
        except Exception:  # noqa: BLE001 - retried on the next pass
            LOG.exception("cannot list IP allocations")
            return released
        for alloc in allocations:
            self._heartbeat()
            try:
                if not self.is_orphan(alloc):
                    continue
                self._release(alloc)
            except _ApiUnavailable as exc:
                LOG.warning("reclaim postponed, the API cannot confirm pods "
                            "are gone: %s", exc)
                break
            except Exception:  # noqa: BLE001 - one allocation never stops the pass
                LOG.exception("cannot reclaim allocation %s/%s",
                              alloc.container_id, alloc.ifname)
                continue
            LOG.info("reclaimed allocation %s/%s of %s", alloc.container_id,
                     alloc.ifname, _owner(alloc))
            released.append(alloc)
        LOG.debug("reclaim pass: %d allocations, %d released",
                  len(allocations), len(released))
        return released


def _owner(alloc: AllocationLike) -> str:
    pod = getattr(alloc, "pod", None)
    if pod is not None and pod.name:
        return f"pod {pod.namespace}/{pod.name}"
    return f"netns {alloc.netns}"
