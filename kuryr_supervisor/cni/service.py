"""CNI orchestration: ADD, DEL, CHECK, STATUS and GC over IPAM and binding.

Role: the one place that orders the steps of each command, holds the
container's lock around them and keeps the CNI ADD failure budget. What
CHECK, STATUS and GC look at and decide is :mod:`.upkeep`'s; the probes of
the environment watch are :mod:`.environment`'s.

Invariants:
- ADD runs :func:`attach.add` under the container's lock: allocate, plumb,
  record (``pending`` -> ``plumbed``), so it leaves nothing when it fails;
  sent twice it is answered from the record, and a half-done one a dead
  process left is rolled back and done afresh (see :mod:`.attach`).
- DEL and GC: unplumb, then release, so an address is never handed out while
  an old interface still carries it. DEL succeeds when anything is already
  gone (netns, interface, allocation).
- ADD refuses a namespace the ``netns_guard`` rejects (production: the
  host's and the daemon's own, :func:`protocol.host_netns_guard`) before
  anything is allocated or plumbed.
- Only ADD failures whose ``WIRE`` row says ``counts_as_failure`` (and
  unexpected exceptions, wrapped as InternalError) feed the budget; client
  errors, vanished pods and timeouts never do; a successful ADD resets it.
- Persistent environment faults (``errors.EnvironmentFault``: corrupt or
  unwritable store, bridge name taken, no CAP_NET_ADMIN) never count: they
  raise their shared-state Fault bit (readiness ``cni-environment``), which
  a successful ADD or :meth:`CNIService.verify_environment` clears.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import attach, environment, protocol, results, upkeep
from kuryr_supervisor.cni.ipam import Allocation, PodRef
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.ports import Binding, Ipam
from kuryr_supervisor.cni.protocol import Request
from kuryr_supervisor.state import Fault, SharedState

LOG = logging.getLogger(__name__)

PodCheck = Callable[[PodRef], None]
_NO_POD = PodRef(namespace="", name="", uid="")


#: Faults a successful ADD proves gone (it wrote the store, on the bridge,
#: with netlink rights).
ADD_PROVES_FINE = (Fault.IPAM_STORE | Fault.DISK_FULL | Fault.BRIDGE_KIND
                   | Fault.NET_ADMIN)


class CNIService:
    """Runs validated :class:`Request` objects; raises ``CNIError`` only."""

    def __init__(self, ipam: Callable[[], Ipam], binding: Binding,
                 locks: ContainerLocks, state: SharedState | None, *,
                 lock_timeout: float = 60.0,
                 pod_check: PodCheck | None = None,
                 netns_guard: Callable[[str], None] | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._ipam = ipam
        self._binding = binding
        self._locks = locks
        self._state = state
        self._lock_timeout = lock_timeout
        self._pod_check = pod_check
        self._netns_guard = netns_guard
        self._wall_clock = wall_clock

    def handle(self, request: Request, *,
               abandoned: Callable[[], bool] | None = None
               ) -> dict[str, Any] | None:
        """Run one command: its result object, or None (nothing to print).

        ``abandoned`` (ADD): asked, still under the container's lock, once a
        new attachment is made; True (the client left: the runtime saw a
        failure) rolls it back there and then, so neither a retry (which
        would otherwise be replayed) nor anything else can slip in between.
        """
        if request.command == "VERSION":
            return protocol.version_answer(request.netconf)
        if request.command == "ADD":
            return self._budgeted_add(request, abandoned)
        step = {"DEL": self._delete, "CHECK": self._check,
                "STATUS": self._status, "GC": self._gc}[request.command]
        try:
            step(request)
        except errors.CNIError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported, never a traceback
            LOG.exception("%s %s failed", request.command, request.container_id)
            raise errors.InternalError(f"{request.command} failed: "
                                       f"{errors.describe(exc)}") from exc
        return None

    # -- ADD --------------------------------------------------------------
    def _budgeted_add(self, request: Request,
                      abandoned: Callable[[], bool] | None) -> dict[str, Any]:
        try:
            result, fresh = self._add(request, abandoned)
        except errors.EnvironmentFault as exc:
            environment.record_fault(self._state, exc, True)
            raise
        except errors.CNIError as exc:
            if exc.wire.counts_as_failure and self._state is not None:
                count = self._state.record_cni_failure()
                LOG.warning("ADD %s failed (%d consecutive internal failures): "
                            "%s", request.container_id, count, exc.msg)
            raise
        except Exception as exc:  # noqa: BLE001 - counted, then reported
            LOG.exception("ADD %s failed unexpectedly", request.container_id)
            if self._state is not None:
                self._state.record_cni_failure()
            raise errors.InternalError(
                f"ADD failed: {errors.describe(exc)}") from exc
        # A replay wrote nothing and plumbed nothing: it proves no fault gone.
        if self._state is not None and fresh:
            self._state.record_cni_success()
            if self._state.faults() & ADD_PROVES_FINE:
                self._state.set_fault(ADD_PROVES_FINE, False)
        return result

    def _add(self, request: Request, abandoned: Callable[[], bool] | None
             ) -> tuple[dict[str, Any], bool]:
        """The result, and whether it was made now (False: replayed)."""
        if self._netns_guard is not None:
            self._netns_guard(request.netns)
        pod = request.pod
        if pod is not None and self._pod_check is not None:
            self._pod_check(pod)
        ipam = self._ipam()
        with self._locks.hold(request.container_id,
                              timeout=self._lock_timeout) as held:
            held.remove = held.created      # a failed ADD leaves no trace
            result, fresh = attach.add(ipam, self._binding, request,
                                       pod or _NO_POD)
            held.remove = False
            if fresh and abandoned is not None and abandoned():
                held.remove = self._roll_back_abandoned(request)
        return result, fresh

    def _roll_back_abandoned(self, request: Request) -> bool:
        """Undo an ADD whose client left before the answer (lock held);
        True when it is gone (the runtime's DEL or GC cleans up if not)."""
        cid, ifname = request.container_id, request.ifname
        LOG.warning("ADD %s/%s finished after the client left: rolling it "
                    "back", cid, ifname)
        try:
            self._detach(cid, ifname, request.netns)
        except Exception as exc:  # noqa: BLE001 - the ADD itself succeeded
            LOG.warning("rollback of abandoned ADD %s/%s failed (the "
                        "runtime's DEL or GC will clean it): %s", cid,
                        ifname, exc)
            return False
        return True

    # -- environment watch, store ------------------------------------------
    def verify_environment(self, state_dir: str) -> Fault:
        """Look for the persistent faults again (Server start, then a timer)
        and raise or clear their Fault bits: :func:`environment.verify`.
        Returns the faults found; never raises."""
        return environment.verify(self._state, state_dir, self._ipam,
                                  self._binding)

    def close(self, *, final: bool = True) -> None:
        """Close the allocation store's connection in this process.

        ``final`` (a graceful stop, after the last request): checkpoint it,
        so no ``ipam.sqlite-wal`` is left behind, and answer later requests
        code 11. Otherwise (a process that uses the store now and then, like
        the Watcher's reclaim) the next use simply reopens it.
        """
        close = getattr(self._ipam, "close", None)
        if close is not None:
            close(final=final)
        # The binding's connections too (the OVS binding's OVSDB one): a
        # process that uses the service now and then holds none between.
        getattr(self._binding, "close", lambda: None)()

    # -- DEL, CHECK ---------------------------------------------------------
    def _delete(self, request: Request) -> None:
        self.forget(request.container_id, request.ifname, request.netns)

    def forget(self, container_id: str, ifname: str, netns: str = "", *,
               created: float | None = None) -> None:
        """DEL without a request: under the container's lock, remove whatever
        is left of an attachment. The Watcher's cleanup calls this, so it
        never races the Server on one container; with ``created`` (the
        allocation it judged orphaned) nothing happens if that allocation
        was meanwhile released or replaced."""
        with self._locks.hold(container_id, timeout=self._lock_timeout,
                              remove=True):
            if created is not None:
                current = self._ipam().get(container_id, ifname)
                if current is None or current.created != created:
                    return
            self._detach(container_id, ifname, netns)

    def allocations(self) -> list[Allocation]:
        """Every allocation (for the Watcher's reconciliation)."""
        return self._ipam().list()

    def _detach(self, container_id: str, ifname: str, netns: str = "") -> None:
        """Remove an attachment, whatever of it is left (lock held)."""
        ipam = self._ipam()
        alloc = ipam.get(container_id, ifname)
        if not netns and alloc is not None:
            netns = alloc.netns
        usable = netns if netns and protocol.is_netns(netns) else None
        try:
            self._binding.unplumb(container_id=container_id, ifname=ifname,
                                  netns=usable)
        except errors.ContainerUnknown:
            # The namespace vanished under us: the host end is all that is left.
            self._binding.unplumb(container_id=container_id, ifname=ifname,
                                  netns=None)
        released = ipam.release(container_id, ifname)
        if released:
            LOG.info("DEL %s/%s: %s", container_id, ifname, released.address)
        else:
            # A repeated DEL is routine (containerd sends one per
            # StopPodSandbox and one more in RemovePodSandbox): no change.
            LOG.debug("DEL %s/%s: nothing was allocated", container_id, ifname)

    def _check(self, request: Request) -> None:
        expected = results.expected_address(request)
        with self._locks.hold(request.container_id, timeout=self._lock_timeout):
            upkeep.check(self._ipam(), self._binding, request, expected)

    # -- STATUS, GC ---------------------------------------------------------
    def _status(self, request: Request) -> None:
        upkeep.status(getattr(self._ipam, "availability", None), self._state)

    def _gc(self, request: Request) -> None:
        started = self._wall_clock()
        upkeep.gc(self._ipam(), self._binding, request.valid_attachments,
                  started=started, forget=self.forget)
