"""Whether pods the handler's pod list lacks are gone: one consistent read.

The port handler lists pods as client-go's reflector does, from the API
server's watch cache (``resourceVersion=0``, the cheapest list), and a
watch cache may lag: several API servers behind one address, a new leader
reaching another one than the old. A port is deleted as a gone pod's only
once a consistent read (a list at ``resourceVersion=""``, served from
etcd, paged) lacks its pod too, as Kubernetes' garbage collector confirms
an owner gone with a live read before it deletes anything. :class:`Gone`
makes that read when the sweep has such ports (never otherwise), and what
it finds, pods the handler's list lacked that exist, is said once in the
log and in ``/status`` (:meth:`~.report.PortReport.lagging`) until the
watch brings them.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.clusterpods import ClusterPods

LOG = logging.getLogger(__name__)


class Gone:
    """See the module; ``beat`` is the handler's heartbeat (between the
    read's pages)."""

    def __init__(self, client: k8s.K8sClient, report: PortReport, *,
                 beat: Callable[[], None]) -> None:
        self.client, self.report, self.beat = client, report, beat
        #: pods that exist (a consistent read had them) and that the
        #: handler's list lacked, until they arrive
        self.lacking: set[str] = set()

    def confirm(self, devices: set[str]) -> set[str]:
        """Of ``devices`` (pod UIDs whose ports the handler's list finds
        no pod for), those a consistent read confirms gone. Raises the
        API's error when it cannot be read: nothing is confirmed."""
        pods, _ = ClusterPods(self.client, beat=self.beat).list("")
        present = {pod.uid for pod in pods} & devices
        del pods
        if present - self.lacking:
            LOG.warning("the pod list lacked %d pods that exist (a consistent "
                        "read has them): the API server's watch cache is "
                        "lagging; their ports are kept", len(present))
        self.lacking |= present
        self.report.lagging(len(self.lacking))
        return devices - present

    def arrived(self, uids: Iterable[str]) -> None:
        """``uids`` are known now (the watch, or a list, brought them)."""
        if self.lacking:
            self.lacking.difference_update(uids)
            if not self.lacking:
                LOG.info("the pods the pod list lacked have arrived")
                self.report.lagging(0)
