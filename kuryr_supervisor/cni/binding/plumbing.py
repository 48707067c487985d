"""What ADD's plumb shares between the bindings (Linux bridge and Open
vSwitch): which CNI error a netlink failure of a plumbing step is, and the
rollback of the host end a failed plumb created.

Invariants:

* An ``EEXIST`` is the request's doing, never ours: from the veth creation
  it names which name is taken (the host end's or the pod's), from the pod
  interface's configuration the namespace's default route or address;
  both are :class:`~kuryr_supervisor.errors.AlreadyExists`. Any other
  failure is :func:`.base.plumbing_error`'s, naming the step.
* Rollback deletes only the host end plumb created (the kernel deletes its
  peer); it logs a failure instead of raising, so the caller raises the
  error that made it roll back.
"""
from __future__ import annotations

import errno
import ipaddress
import logging

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netlink as _netlink
from kuryr_supervisor.cni.binding.base import BindingBase, plumbing_error

LOG = logging.getLogger(__name__)

CREATE_VETH = "create veth"
"""The plumbing step that creates the veth pair (its name in errors)."""
CONFIGURE_POD = "configure pod interface"
"""The plumbing step that sets the pod end's address and default route."""


class Plumbing(BindingBase):
    """ADD's error mapping and rollback, for every binding's plumb."""

    def _plumb_error(self, exc: _netlink.NetlinkError, *, step: str,
                     container_id: str, ifname: str, netns: str,
                     address: ipaddress.IPv4Interface) -> errors.CNIError:
        """The CNI error for ``exc``, raised by plumb's ``step``."""
        if step == CREATE_VETH and exc.errno == errno.EEXIST:
            return self._which_exists(container_id, ifname, netns, exc)
        if step == CONFIGURE_POD and exc.errno == errno.EEXIST:
            # The pod's namespace already has a default route (another
            # interface's) or this address: the request's doing, not ours.
            return errors.AlreadyExists(
                f"netns {netns} already has a default route or "
                f"{address}: {ifname} cannot be configured there",
                f"errno={exc.errno}")
        return plumbing_error(f"plumb {container_id}/{ifname}: {step}", exc)

    def _which_exists(self, container_id: str, ifname: str, netns: str,
                      exc: _netlink.NetlinkError) -> errors.CNIError:
        """EEXIST from the veth creation: the host end, or the pod's name?"""
        host = self.host_ifname(container_id, ifname)
        try:
            with self._nl.rtnl() as nl:
                host_taken = nl.index(host) is not None
        except (OSError, _netlink.NetlinkError):
            return errors.AlreadyExists(
                f"host interface {host} or interface {ifname} in netns "
                f"{netns} already exists", f"errno={exc.errno}")
        if host_taken:
            return errors.AlreadyExists(
                f"host interface {host} for {container_id}/{ifname} "
                "already exists", f"errno={exc.errno}")
        return errors.AlreadyExists(
            f"interface {ifname} already exists in netns {netns}",
            f"errno={exc.errno}")

    def _rollback_veth(self, host: str) -> None:
        """Delete the host end plumb created; the peer goes with it."""
        try:
            with self._nl.rtnl() as nl:
                self._nl.remove_link(nl, host)
        except _netlink.NetlinkError as exc:
            LOG.error("rollback: could not delete %s: %s", host, exc)
