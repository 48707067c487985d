"""The Watcher worker: this node's pods into the registry, leaks reclaimed.

Kubernetes mode: an :class:`~kuryr_supervisor.kubernetes.informer.Informer`
of this node's pods keeps the pod registry in step with the API; ready once
the first list is in; after a pod deletion or a relist (and every
``reclaim_interval``) allocations of pods that are gone are released. With the OVS binding and the PodPort as
the address source, a thread follows this node's PodPorts and points a
pod's interface at its port when the controller made the port again
(:mod:`~kuryr_supervisor.kubernetes.podportfollow`), sharing the pods
whose port is lost with the HealthManager (``state.lost_ports``). Standalone mode:
allocations whose netns is gone are released every ``reclaim_interval``;
ready after the first pass.

The loops below are plain objects (tested against a fake API over HTTP);
the worker only builds them. Heartbeats come from the loops themselves.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import ClassVar, cast

from oslo_config import cfg

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.informer import Informer
from kuryr_supervisor.kubernetes.reclaim import ListAllocations, Reclaimer, Release
from kuryr_supervisor.kubernetes.registry import Pod, PodRefLike, PodRegistry, registry_path
from kuryr_supervisor.state import WorkerKind
from kuryr_supervisor.workers import assembly
from kuryr_supervisor.workers.base import Worker

LOG = logging.getLogger(__name__)

AllocationHooks = Callable[[cfg.ConfigOpts],
                           "tuple[ListAllocations, Release] | None"]


class RegistrySink:
    """The informer's sink: the registry, noting when pods went away."""

    def __init__(self, registry: PodRegistry) -> None:
        self.registry = registry
        self.removed = False     # a pod left: time to reclaim

    def replace_all(self, pods: Iterable[Pod], resource_version: str) -> None:
        self.registry.replace_all(pods, resource_version)
        self.removed = True

    def upsert(self, pod: Pod) -> None:
        self.registry.upsert(pod)

    def delete(self, pod: Pod) -> None:
        self.registry.delete(pod.namespace, pod.name)
        self.removed = True


def confirm_gone(client: k8s.K8sClient) -> Callable[[PodRefLike], bool]:
    """True when the API has no such pod, or one with another UID."""
    def gone(ref: PodRefLike) -> bool:
        obj = client.pods.get(ref.name, namespace=ref.namespace)
        return obj is None or bool(
            ref.uid and k8s.pod_from_json(obj).uid != ref.uid)
    return gone


class ReclaimTimer:
    """Runs a reconciliation when asked to or when it is due."""

    def __init__(self, reclaimer: Reclaimer | None, interval: float) -> None:
        self.reclaimer, self.interval = reclaimer, interval
        self._last: float | None = None

    def maybe(self, requested: bool = False) -> bool:
        now = time.monotonic()
        if self.reclaimer is None or not (
                requested or self._last is None
                or now - self._last >= self.interval):
            return False
        self._last = now
        self.reclaimer.reconcile()
        return True


class KubernetesLoop:
    """This node's pods into the registry, reclaiming after removals."""

    def __init__(self, client: k8s.K8sClient, registry: PodRegistry, *,
                 reclaimer: Reclaimer | None, heartbeat: Callable[[], None],
                 heartbeat_interval: float, reclaim_interval: float,
                 backoff_max: float, on_synced: Callable[[], None],
                 on_relist: Callable[[], None] = lambda: None,
                 on_error: Callable[[str], None] = lambda kind: None) -> None:
        self.sink = RegistrySink(registry)
        self.timer = ReclaimTimer(reclaimer, reclaim_interval)
        self._heartbeat = heartbeat
        self.watch = Informer(
            client.node_pods, self.sink, heartbeat=self.tick,
            heartbeat_interval=heartbeat_interval, backoff_max=backoff_max,
            stall_timeout=client.watch_read_timeout + 5.0,
            on_synced=on_synced, on_relist=on_relist, on_error=on_error)

    def tick(self) -> None:
        self._heartbeat()
        if self.watch.synced:
            removed, self.sink.removed = self.sink.removed, False
            self.timer.maybe(removed)

    def run(self, stopping: threading.Event) -> None:
        self.watch.run(stopping)


class StandaloneLoop:
    """Reclaim allocations whose netns is gone, every ``interval``."""

    def __init__(self, reclaimer: Reclaimer | None, *,
                 heartbeat: Callable[[], None], heartbeat_interval: float,
                 reclaim_interval: float, on_ready: Callable[[], None]) -> None:
        self.timer = ReclaimTimer(reclaimer, reclaim_interval)
        self._heartbeat, self._interval = heartbeat, heartbeat_interval
        self._on_ready = on_ready

    def run(self, stopping: threading.Event) -> None:
        self._heartbeat()
        self.timer.maybe(True)
        self._on_ready()
        while not stopping.wait(self._interval):
            self._heartbeat()
            self.timer.maybe()


def default_allocation_hooks(conf: cfg.ConfigOpts
                             ) -> tuple[ListAllocations, Release] | None:
    """The CNI service's own (list, release) -- the same path as CNI GC,
    under the container's lock, so reclaim never races the Server."""
    listing, release = assembly.allocation_hooks(conf)
    return listing, cast(Release, release)   # an ipam.Allocation is AllocationLike


class WatcherWorker(Worker):
    name = "Watcher"
    kind = WorkerKind.WATCHER
    #: Builds (list_allocations, release); replaced in tests.
    allocation_hooks: ClassVar[AllocationHooks] = staticmethod(
        default_allocation_hooks)
    _loop: KubernetesLoop | StandaloneLoop | None = None

    def _reclaimer(self, lookup: Callable[[str, str], Pod | None] | None,
                   gone: Callable[[PodRefLike], bool] | None
                   ) -> Reclaimer | None:
        try:
            hooks = type(self).allocation_hooks(self.conf)
        except Exception:  # noqa: BLE001 - watching goes on without reclaim
            LOG.exception("IP allocations cannot be reclaimed")
            return None
        if hooks is None:
            return None
        return Reclaimer(hooks[0], hooks[1], lookup_pod=lookup,
                         confirm_gone=gone, heartbeat=self.beat)

    def reloaded(self) -> None:
        """[watcher] reclaim_interval and backoff_max are mutable."""
        timer = getattr(self._loop, "timer", None)
        if timer is not None:
            timer.interval = self.conf.watcher.reclaim_interval
        watch = getattr(self._loop, "watch", None)
        if watch is not None:
            watch.backoff_max = self.conf.watcher.backoff_max

    def _ready(self) -> None:
        self.state.set_ready(self.component, True)

    def _follow(self, client: k8s.K8sClient) -> None:
        """With the OVS binding and the PodPort as the address source:
        follow this node's PodPorts (see the module)."""
        conf = self.conf
        if conf.binding.driver != "ovs" or conf.cni_daemon.address_source \
                not in ("podport", "annotation"):
            return
        from kuryr_supervisor.cni import binding as bindings
        from kuryr_supervisor.kubernetes import events as k8s_events
        from kuryr_supervisor.kubernetes.lostpods import LostPods
        from kuryr_supervisor.kubernetes.podportfollow import PodPortFollower
        binding = bindings.from_conf(conf)
        assert isinstance(binding, bindings.OvsBinding)
        events = k8s_events.recorder(client).start()
        PodPortFollower(client, client.node, binding.repoint,
                        backoff_max=float(conf.watcher.backoff_max),
                        tell=events.record,
                        lost=LostPods(self.state.lost_ports.publish)
                        ).start(self.stopping)

    def serve(self) -> None:
        interval = self.heartbeat_interval
        reclaim_interval = self.conf.watcher.reclaim_interval
        if not k8s.is_configured(self.conf):
            LOG.info("no Kubernetes API configured: standalone mode")
            self._loop = StandaloneLoop(
                self._reclaimer(None, None), heartbeat=self.beat,
                heartbeat_interval=interval, reclaim_interval=reclaim_interval,
                on_ready=self._ready)
            self._loop.run(self.stopping)
            return
        client = k8s.K8sClient.from_conf(self.conf,
                                         master_pid=self._master_pid)
        registry = PodRegistry(registry_path(self.conf.ipam.state_dir))
        LOG.info("watching pods of node %s", client.node)
        self._follow(client)
        self._loop = loop = KubernetesLoop(
            client, registry,
            reclaimer=self._reclaimer(registry.get, confirm_gone(client)),
            heartbeat=self.beat, heartbeat_interval=interval,
            reclaim_interval=reclaim_interval,
            backoff_max=self.conf.watcher.backoff_max, on_synced=self._ready,
            on_relist=self.state.record_watch_relist,
            on_error=self.state.record_watch_error)
        try:
            loop.run(self.stopping)
        finally:
            registry.close()
            client.close()
