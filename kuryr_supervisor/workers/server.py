"""The Server worker: serves the CNI API until SIGTERM, then drains.

A thin shell: :func:`build_service` wires the IPAM store, the bridge binding
and the container locks from the configuration; the worker binds the socket,
reports ready once accepting, heartbeats from the accept loop (so a wedged
loop is seen as stale) and on SIGTERM stops accepting, lets in-flight
requests finish within the graceful shutdown budget, and returns.
"""
from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.cni.hostveths import GcBridgeBinding
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.ports import Ipam, LazyIpam
from kuryr_supervisor.cni.service import CNIService, PodCheck
from kuryr_supervisor.cni.serving import CNIServer
from kuryr_supervisor.conf import ipam as ipam_conf
from kuryr_supervisor.ipam import Allocation, IpamStore
from kuryr_supervisor.state import Component, SharedState
from kuryr_supervisor.workers.base import Worker

LOG = logging.getLogger(__name__)

SubnetProvider = Callable[[], "ipaddress.IPv4Network | None"]
_DRAIN_MARGIN = 2.0     # seconds kept from graceful_shutdown_timeout to exit


def locks_dir(conf: cfg.ConfigOpts) -> str:
    """Where the per-container lock files live (shared with the Watcher)."""
    return os.path.join(conf.ipam.state_dir, "locks")


def build_service(conf: cfg.ConfigOpts, state: SharedState | None, *,
                  pod_check: PodCheck | None = None,
                  subnet: SubnetProvider | None = None) -> CNIService:
    """The CNI service as configured.

    ``pod_check`` (raises ``errors.PodGone``) runs on ADD before allocating;
    ``subnet`` replaces [ipam] subnet, e.g. with the Node's podCIDR (return
    None while unknown: ADD then answers code 11, STATUS code 50).
    """
    settings = ipam_conf.settings(conf)

    def open_store(net: ipaddress.IPv4Network) -> Ipam:
        same = net == settings.subnet
        return IpamStore(settings.db_path, net,
                         gateway=settings.gateway if same else None,
                         range_start=settings.range_start if same else None,
                         range_end=settings.range_end if same else None)

    binding = GcBridgeBinding(conf.binding.bridge, conf.binding.mtu)
    return CNIService(
        LazyIpam(open_store, subnet or (lambda: settings.subnet)), binding,
        ContainerLocks(locks_dir(conf)), state,
        lock_timeout=conf.cni_daemon.request_timeout, pod_check=pod_check)


def allocation_hooks(conf: cfg.ConfigOpts
                     ) -> tuple[Callable[[], list[Allocation]],
                                Callable[[Allocation], None]]:
    """(list, release) for the Watcher's reclaim, through the service, so a
    release takes the container's lock and never races the Server."""
    service = build_service(conf, None)

    def release(alloc: Allocation) -> None:
        service.forget(alloc.container_id, alloc.ifname, alloc.netns,
                       created=alloc.created)
    return service.allocations, release


class ServerWorker(Worker):
    name = "Server"
    component = Component.SERVER

    _server: CNIServer | None = None
    _app: CNIApp | None = None

    def serve(self) -> None:
        opts = self.conf.cni_daemon
        self._app = CNIApp(build_service(self.conf, self.state),
                           max_request_bytes=opts.max_request_bytes)
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
