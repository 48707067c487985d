"""The Server worker: serves the CNI API until SIGTERM, then drains.

A thin shell: :mod:`kuryr_supervisor.workers.assembly` builds the service from the
configuration; the worker binds the socket,
reports ready once accepting, heartbeats from the accept loop (so a wedged
loop is seen as stale) and on SIGTERM stops accepting, lets in-flight
requests finish within the graceful shutdown budget, and returns.
"""
from __future__ import annotations

import logging

from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.cni.serving import CNIServer
from kuryr_supervisor.state import Component
from kuryr_supervisor.workers.assembly import build_server_service
from kuryr_supervisor.workers.base import Worker

LOG = logging.getLogger(__name__)

_DRAIN_MARGIN = 2.0     # seconds kept from graceful_shutdown_timeout to exit


class ServerWorker(Worker):
    name = "Server"
    component = Component.SERVER

    _server: CNIServer | None = None
    _app: CNIApp | None = None

    def serve(self) -> None:
        opts = self.conf.cni_daemon
        self._app = CNIApp(build_server_service(self.conf, self.state),
                           max_request_bytes=opts.max_request_bytes,
                           state=self.state)
        server = CNIServer(opts.bind_address, self._app,
                           max_concurrency=opts.max_concurrency,
                           request_timeout=opts.request_timeout,
                           state=self.state, on_poll=self.beat)
        self._server = server
        if self.stopping.is_set():      # SIGTERM arrived while binding
            server.stop_accepting()
            return
        LOG.info("CNI API listening on %s (%d concurrent requests)",
                 opts.bind_address, opts.max_concurrency)
        self.state.set_ready(self.component, True)
        server.serve_forever(poll_interval=min(self.heartbeat_interval, 0.5))

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

    def reloaded(self) -> None:
        if self._app is not None:
            self._app.max_request_bytes = self.conf.cni_daemon.max_request_bytes
