"""When ADD may return with the OVS binding: the pod's port proven wired.

Two proofs, chosen by ``[binding] ovs_port_ready``:

* ``ovn-installed`` -- ovn-controller sets ``external_ids:ovn-installed``
  on the pod's Interface once the port's flows are installed (OVN 20.06 and
  later), as OVN-Kubernetes' CNI waits for it: seen through the node's own
  OVSDB connection's monitor, no API call, no poll, and it means the flows
  are really there;
* ``port-status`` -- Neutron's ACTIVE, carried into the pod's PodPort by
  the controller (``[cni_daemon] wait_for_active_port``): what an ML2/OVS
  agent's node (and an OVN older than 20.06) can give.

``auto`` judges once per process, from the node itself
(:meth:`~kuryr_supervisor.cni.ovsdb.ovnlocal.OvnLocal.installs_flag`):
``ovn-installed`` on an OVN chassis, ``port-status`` elsewhere; the choice
and its reason are logged once.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.cni import ovsdb as _ovsdb
from kuryr_supervisor.cni.binding.ovs import OvsBinding
from kuryr_supervisor.cni.ipam.records import Allocation

LOG = logging.getLogger(__name__)

INSTALLED, STATUS = "ovn-installed", "port-status"

#: ``(allocation, seconds)``: return once the pod's port is wired, else
#: raise a CNI error (code 11, never counted).
Ready = Callable[[Allocation, float], None]


class PortReady:
    """The wait after plumbing (:data:`Ready`) for ``binding``;
    ``port_status`` is the PodPort's ACTIVE wait (None: not wired, e.g.
    ``wait_for_active_port = false``)."""

    def __init__(self, conf: cfg.ConfigOpts, binding: OvsBinding,
                 port_status: Ready | None) -> None:
        self.conf = conf
        self.binding = binding
        self.port_status = port_status
        self._judged: str | None = None
        self._lock = threading.Lock()

    def mode(self) -> str:
        """The proof waited for (the option, or ``auto``'s judgement)."""
        chosen = str(self.conf.binding.ovs_port_ready)
        if chosen != "auto":
            return chosen
        with self._lock:
            if self._judged is None:
                try:
                    flag, why = self.binding.ovn.installs_flag()
                except _ovsdb.OvsdbError as exc:
                    # Not judged: the port-status wait this time, asked
                    # again at the next ADD.
                    LOG.info("cannot tell whether this is an OVN chassis "
                             "(%s): waiting for the port's status", exc)
                    return STATUS
                self._judged = INSTALLED if flag else STATUS
                LOG.info("ADD waits for %s: %s", self._judged, why)
            return self._judged

    def __call__(self, alloc: Allocation, seconds: float) -> None:
        if not alloc.port_id:
            return
        if self.mode() == INSTALLED:
            self.binding.wait_installed(alloc.container_id, alloc.ifname,
                                        alloc.port_id, seconds)
        elif self.port_status is not None:
            self.port_status(alloc, seconds)
