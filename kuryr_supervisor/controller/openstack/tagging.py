"""Tags set after a create, where Neutron drops a create's tags.

Neutron keeps the tags a create names only with ML2's extension driver
``tag_ports_during_bulk_creation``; elsewhere (Neutron's and devstack's
default) each port the controller makes is tagged right after its create
through the tags API (``PUT /v2.0/ports/{id}/tags``), as Kuryr does.
:class:`Tags` makes those calls for :class:`~.making.PortMaker`, keeps the
ones that failed to try them again (:meth:`Tags.retag`, at every resync),
and tags a port whose tag call was lost for good (the controller died
between the create and the call) once a list finds it by what its create
gave it (:meth:`Tags.recognise`: its owner and its name, which carries the
cluster's tag, :func:`~.wire.named_ours`). Any other untagged port is
left alone: never adopted, never deleted.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence

from kuryr_supervisor.controller.openstack.neutron import NeutronApi
from kuryr_supervisor.controller.openstack.wire import (
    DEVICE_OWNER,
    OpenStackRefused,
    OpenStackUnavailable,
    Port,
    named_ours,
)

LOG = logging.getLogger(__name__)


class Tags:
    """See the module; ``cloud`` makes the calls."""

    def __init__(self, cloud: NeutronApi) -> None:
        self.cloud = cloud
        self._lock = threading.Lock()
        #: port id -> the tags its tag call failed to set
        self._untagged: dict[str, tuple[str, ...]] = {}

    def tagged(self, ports: Sequence[Port], tags: Sequence[str],
               timeout: float) -> list[Port]:
        """``ports`` with ``tags``: those that lack them are tagged now
        (tags API); a tag call that fails is tried again by
        :meth:`retag`, the port returned as it is meanwhile."""
        if not tags:
            return list(ports)
        out = []
        lacking = [p for p in ports if not set(tags) <= set(p.tags)]
        api = self.cloud.within(timeout)
        for port in ports:
            if port in lacking:
                port = self._tag(api, port, tuple(dict.fromkeys(
                    (*port.tags, *tags))))
            out.append(port)
        return out

    def _tag(self, api: NeutronApi, port: Port,
             tags: tuple[str, ...]) -> Port:
        try:
            got = api.set_tags(port.id, tags)
        except Exception as exc:  # noqa: BLE001 - tried again, said once
            with self._lock:
                first = not self._untagged
                self._untagged[port.id] = tags
            if first:
                LOG.warning("port %s not tagged yet (%s): tried again at "
                            "every resync", port.id, exc)
            return port
        with self._lock:
            self._untagged.pop(port.id, None)
        return dataclasses.replace(port, tags=tuple(got))

    @property
    def pending(self) -> bool:
        """Some port's tag call failed and is not yet done."""
        with self._lock:
            return bool(self._untagged)

    def retag(self) -> None:
        """Try again the tag calls that failed; one that fails again is
        kept for the next time, unless its port is gone (Neutron answers a
        tag call on a missing port with a 500)."""
        with self._lock:
            todo = dict(self._untagged)
        api = self.cloud.within(self.cloud.timeout)
        for port_id, tags in todo.items():
            try:
                api.set_tags(port_id, tags)
            except OpenStackRefused:
                pass                    # refused as it is: never will do
            except OpenStackUnavailable:
                try:
                    if api.port(port_id) is not None:
                        continue        # there, not tagged: next time
                except OpenStackUnavailable:
                    continue
            with self._lock:
                self._untagged.pop(port_id, None)

    def recognise(self, ports: Sequence[Port], tag: str,
                  tags_of: Callable[[Port], Sequence[str]],
                  owner: str = DEVICE_OWNER) -> list[Port]:
        """The ports of ``ports`` (listed without ``tag``) that the
        cluster of ``tag`` made (:func:`~.wire.named_ours`: name and
        ``owner``), tagged now with ``tags_of(port)`` and returned so; any
        other is left alone, never adopted nor deleted."""
        out = []
        api = self.cloud.within(self.cloud.timeout)
        for port in ports:
            if tag in port.tags or not named_ours(port, tag, owner):
                continue
            tags = tuple(dict.fromkeys((*port.tags, *tags_of(port))))
            got = api.set_tags(port.id, tags)
            LOG.warning("port %s (%s) had lost its tags (a tag call that "
                        "never happened): tagged and adopted", port.id,
                        port.name)
            out.append(dataclasses.replace(port, tags=tuple(got)))
        return out
