"""The Server worker: serves the CNI API until SIGTERM, then drains.

A thin shell: :mod:`kuryr_supervisor.workers.assembly` builds the service from the
configuration; the worker serves the listening socket it inherited from
the master (it never binds or unlinks one: a Server that dies leaves new
connections in the kernel's backlog for the next), looks for persistent environment faults (a thread: at start, then on a
timer), reports ready once accepting and checked, heartbeats from the accept loop (so a wedged
loop is seen as stale) and on SIGTERM stops accepting, lets in-flight
requests finish within the graceful shutdown budget, and returns.
"""
from __future__ import annotations

import logging
import socket
import threading

from cotyledon.types import WorkerId
from oslo_config import cfg

from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.cni.handoff import Handoff
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.cni.serving import CNIServer
from kuryr_supervisor.state import SharedState, WorkerKind
from kuryr_supervisor.workers.assembly import build_server_service
from kuryr_supervisor.workers.base import Worker

LOG = logging.getLogger(__name__)

_DRAIN_MARGIN = 2.0     # seconds kept from graceful_shutdown_timeout to exit
#: Seconds between environment checks (store integrity, disk, bridge kind,
#: CAP_NET_ADMIN) when all is well, and while a fault is present.
ENV_WATCH_INTERVAL = 5.0
ENV_WATCH_FAULTED = 2.0


class ServerWorker(Worker):
    name = "Server"
    kind = WorkerKind.SERVER

    _server: CNIServer | None = None
    _app: CNIApp | None = None

    def __init__(self, worker_id: WorkerId, state: SharedState,
                 conf: cfg.ConfigOpts, master_pid: int, *,
                 listener: socket.socket,
                 handoff: Handoff | None = None) -> None:
        super().__init__(worker_id, state, conf, master_pid)
        self._listener = listener
        self._handoff = handoff

    def serve(self) -> None:
        opts = self.conf.cni_daemon
        service = build_server_service(self.conf, self.state,
                                       master_pid=self._master_pid)
        self._app = CNIApp(service, max_request_bytes=opts.max_request_bytes,
                           state=self.state)
        checked = threading.Event()
        threading.Thread(target=self._watch_environment, args=(service, checked),
                         name="environment-watch", daemon=True).start()
        server = CNIServer(self._listener, self._app,
                           max_concurrency=opts.max_concurrency,
                           request_timeout=opts.request_timeout,
                           state=self.state, on_poll=self.beat,
                           handoff=self._handoff)
        self._server = server
        if self.stopping.is_set():      # SIGTERM arrived while starting
            server.stop_accepting()
            return
        LOG.info("CNI API accepting on %s (%d concurrent requests)",
                 opts.bind_address, opts.max_concurrency)
        # Ready only once the environment was looked at: a corrupt store
        # must fail /ready (and so /startup) from the very first probe.
        while not checked.wait(self.heartbeat_interval):
            self.beat()
            if self.stopping.is_set():
                return
        self.state.set_ready(self.component, True)
        server.serve_forever(poll_interval=min(self.heartbeat_interval, 0.5))

    def _watch_environment(self, service: CNIService,
                           checked: threading.Event) -> None:
        """Look for persistent environment faults at start, then again every
        ENV_WATCH_FAULTED s while one is present (so readiness recovers once
        the operator fixed it) and every ENV_WATCH_INTERVAL s otherwise. In
        its own thread: a busy store must not stall the heartbeat."""
        state_dir = self.conf.ipam.state_dir
        while True:
            found = service.verify_environment(state_dir)
            checked.set()
            if self.stopping.wait(ENV_WATCH_FAULTED if found
                                  else ENV_WATCH_INTERVAL):
                return

    def drain(self) -> None:
        self.state.set_ready(self.component, False)
        server = self._server
        if server is None:
            return
        server.stop_accepting()
        budget = max(self.conf.supervisor.graceful_shutdown_timeout
                     - _DRAIN_MARGIN, 1.0)
        if server.wait_idle(budget):
            LOG.info("CNI API drained")
        else:
            LOG.warning("CNI API: %d request(s) still running after %.0f s",
                        server.inflight, budget)
        if self._app is not None:       # checkpointed: no -wal left behind
            self._app.close()

    def reloaded(self) -> None:
        if self._app is not None:
            self._app.max_request_bytes = self.conf.cni_daemon.max_request_bytes
