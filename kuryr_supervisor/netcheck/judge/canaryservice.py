"""The canary Service: one selector-less Kubernetes Service whose
endpoints are the nodes' canaries, so that the ``services`` handler
gives it an Octavia load balancer as any Service and every node's canary
can reach that load balancer's VIP.

Kept by the ``network_canary`` handler, only where the ``services``
handler runs (:func:`wanted`):

* the Service ``kube-system/kuryr-canary`` (:data:`NAME`), type
  ``ClusterIP``, no selector, one TCP port, ``canary_tcp_port`` (8094),
  on which each canary answers its peers; labelled as ours
  (:data:`LABELS`); one of that name without our label is someone
  else's: it is left alone, said once, and no node probes a VIP;
* its EndpointSlice ``kuryr-canary`` with
  ``endpointslice.kubernetes.io/managed-by: kuryr-supervisor``, so
  Kubernetes' EndpointSlice controller leaves it alone (it manages only
  its own, and selector-less Services get none), owned by the Service
  (the garbage collector deletes it with it): an endpoint per node whose
  canary is up and that the judge does not hold faulty (its address, its
  node), ready;
* written only when it differs from what was last read (a PUT with its
  resourceVersion; a conflict reads it again at the next pass), read
  again every ``canary_resync_interval`` so that a change by someone
  else is undone.

What :meth:`CanaryService.sync` returns (the Service's ``clusterIP`` and
port) is what the records' specs tell the nodes
(:mod:`kuryr_supervisor.netcheck.codecs.servicespec`).
"""
from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kuryr_supervisor.conf import services as services_conf
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.netcheck.codecs.servicespec import ServiceTarget

LOG = logging.getLogger(__name__)

NAMESPACE, NAME = "kube-system", "kuryr-canary"
MANAGER = "kuryr-supervisor"
#: Our label on the Service and its slice.
LABELS = {"app.kubernetes.io/managed-by": MANAGER,
          "kuryr-supervisor.openstack.org/canary": "true"}
PORT_NAME = "canary"


def wanted(conf: Any) -> bool:
    """Whether the ``services`` handler runs beside this one (its
    options set): only then is there a canary Service."""
    return services_conf.HANDLER in conf.controller.handlers and \
        bool(conf.services.service_subnet_id)


def build(conf: Any, client: k8s.K8sClient,
          beat: Callable[[], None]) -> CanaryService | None:
    """The canary handler's canary Service (None: no ``services``
    handler)."""
    if not wanted(conf):
        return None
    opts = conf.network_health
    return CanaryService(client, port=lambda: int(opts.canary_tcp_port),
                         beat=beat)


def ours(obj: Mapping[str, Any] | None) -> bool:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in LABELS.items())


class CanaryService:
    """See the module; ``port`` is read at every pass (SIGHUP)."""

    def __init__(self, client: k8s.K8sClient, *, port: Callable[[], int],
                 beat: Callable[[], None] = lambda: None) -> None:
        self.client, self._port, self._beat = client, port, beat
        self.service: dict[str, Any] | None = None
        self.slice: dict[str, Any] | None = None
        self._read = False
        self._said = ""
        self.writes = 0

    def refresh(self) -> None:
        """Read both again at the next :meth:`sync`."""
        self._read = False

    def sync(self, canaries: Mapping[str, ipaddress.IPv4Address]
             ) -> ServiceTarget | None:
        """The Service and its slice made to list ``canaries`` (node ->
        its canary's address); the VIP and port (None: none yet, or the
        name is someone else's)."""
        port = int(self._port())
        if not self._read:
            self.service = self.client.services.get(NAME,
                                                    namespace=NAMESPACE)
            self.slice = self.client.endpointslices.get(NAME,
                                                        namespace=NAMESPACE)
            self._read = True
            self._beat()
        if self.service is not None and not ours(self.service):
            self._say(f"Service {NAMESPACE}/{NAME} is not ours (no label "
                      f"{LABELS}): no node probes the service path")
            return None
        self._service(port)
        if self.service is None:
            return None
        self._slice(self.service, port, canaries)
        vip = (self.service.get("spec") or {}).get("clusterIP")
        try:
            address = ipaddress.IPv4Address(vip)
        except ValueError:
            self._say(f"Service {NAMESPACE}/{NAME} has no IPv4 clusterIP "
                      f"({vip!r})")
            return None
        self._said = ""
        return ServiceTarget(address, port)

    def _service(self, port: int) -> None:
        spec = {"type": "ClusterIP", "ports": [
            {"name": PORT_NAME, "protocol": "TCP", "port": port,
             "targetPort": port}]}
        have = self.service
        if have is not None and (have.get("spec") or {}).get("ports") == \
                spec["ports"] and not (have.get("spec") or {}).get(
                    "selector"):
            return
        try:
            if have is None:
                self.service = self.client.services.create({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": NAME, "namespace": NAMESPACE,
                                 "labels": dict(LABELS)},
                    "spec": spec}, namespace=NAMESPACE)
                LOG.info("made the canary Service %s/%s (clusterIP %s)",
                         NAMESPACE, NAME,
                         (self.service.get("spec") or {}).get("clusterIP"))
            else:
                body = dict(have)
                body["spec"] = {**(have.get("spec") or {}), **spec}
                body["spec"].pop("selector", None)
                self.service = self.client.services.replace(
                    NAME, body, namespace=NAMESPACE)
            self.writes += 1
        except k8s.K8sPermanent as exc:
            if exc.status != 409:
                raise
            self.refresh()        # made or changed meanwhile: read again
        self._beat()

    def _slice(self, service: Mapping[str, Any], port: int,
               canaries: Mapping[str, ipaddress.IPv4Address]) -> None:
        meta = service.get("metadata") or {}
        want = {
            "addressType": "IPv4",
            "ports": [{"name": PORT_NAME, "protocol": "TCP", "port": port}],
            "endpoints": [{"addresses": [str(address)], "nodeName": node,
                           "conditions": {"ready": True, "serving": True,
                                          "terminating": False}}
                          for node, address in sorted(canaries.items())]}
        labels = {**LABELS, "kubernetes.io/service-name": NAME,
                  "endpointslice.kubernetes.io/managed-by": MANAGER}
        owner = [{"apiVersion": "v1", "kind": "Service", "name": NAME,
                  "uid": meta.get("uid", ""), "controller": True,
                  "blockOwnerDeletion": False}]
        have = self.slice
        if have is not None and all(have.get(k) == v for k, v in
                                    want.items()) and \
                (have.get("metadata") or {}).get("labels") == labels and \
                (have.get("metadata") or {}).get("ownerReferences") == owner:
            return
        body: dict[str, Any] = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": NAME, "namespace": NAMESPACE,
                         "labels": labels, "ownerReferences": owner},
            **want}
        try:
            if have is None:
                self.slice = self.client.endpointslices.create(
                    body, namespace=NAMESPACE)
            else:
                body["metadata"]["resourceVersion"] = \
                    (have.get("metadata") or {}).get("resourceVersion", "")
                self.slice = self.client.endpointslices.replace(
                    NAME, body, namespace=NAMESPACE)
            self.writes += 1
            LOG.debug("canary Service's endpoints: %d canaries",
                      len(canaries))
        except k8s.K8sPermanent as exc:
            if exc.status not in (404, 409):
                raise
            self.refresh()
        self._beat()

    def release(self) -> bool:
        """The Service deleted (its slice with it, and its load balancer
        by the ``services`` handler); only ours. False if there was none."""
        obj = self.client.services.get(NAME, namespace=NAMESPACE)
        if obj is None or not ours(obj):
            return False
        uid = (obj.get("metadata") or {}).get("uid", "")
        gone = self.client.services.delete(NAME, namespace=NAMESPACE,
                                           uid=uid)
        self.client.endpointslices.delete(NAME, namespace=NAMESPACE)
        self.service = self.slice = None
        return gone

    def _say(self, text: str) -> None:
        if text != self._said:
            LOG.warning("%s", text)
            self._said = text
