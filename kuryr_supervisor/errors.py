"""The error taxonomy and its one table of wire codes.

Every failure the CNI path can report is a :class:`CNIError` subclass. The
table :data:`WIRE` maps each class to its CNI error code (spec codes below
100, plugin codes from 100), its HTTP status on the daemon's API, and whether
it counts against the CNI ADD failure budget. Only internal failures count:
no local client can make the daemon unhealthy by sending garbage.
"""
from __future__ import annotations

import dataclasses
from typing import Any


class CNIError(Exception):
    """Base of every error reported to a CNI client."""

    def __init__(self, msg: str, details: str = "") -> None:
        if not _says_something(msg):    # "0", "", "-1": says nothing
            msg = f"{type(self).__name__}: {msg or 'no detail'}"
        super().__init__(msg)
        self.msg = msg
        self.details = details

    @property
    def wire(self) -> Wire:
        for cls in type(self).__mro__:
            if cls in WIRE:
                return WIRE[cls]
        raise LookupError(type(self))  # pragma: no cover - table is complete

    def to_cni(self, cni_version: str) -> dict[str, Any]:
        """The spec's error object."""
        return {"cniVersion": cni_version, "code": self.wire.code,
                "msg": self.msg, "details": self.details}


def _says_something(text: str) -> bool:
    return any(ch.isalpha() for ch in text)


def describe(exc: BaseException) -> str:
    """``exc`` as an operator can read it: its own text when that says
    something, else its type too (``KeyError: 0``, not ``0``)."""
    text = str(exc)
    if _says_something(text) and not isinstance(exc, (KeyError, IndexError)):
        return text
    return f"{type(exc).__name__}: {text or 'no detail'}"


# Permanent errors: the request itself is wrong; retrying it cannot help.
class IncompatibleVersion(CNIError):
    """Unsupported cniVersion (spec code 1)."""


class UnsupportedField(CNIError):
    """Unsupported field in the network configuration (spec code 2)."""


class ContainerUnknown(CNIError):
    """Container unknown or does not exist, e.g. its netns is gone (code 3)."""


class InvalidEnvironment(CNIError):
    """A CNI_* variable is missing or invalid (spec code 4)."""


class DecodeError(CNIError):
    """The request or netconf could not be decoded (spec code 6)."""


class InvalidConfig(CNIError):
    """The network configuration is invalid (spec code 7)."""


class RequestTooLarge(DecodeError):
    """The request body is over the daemon's size limit (code 6, HTTP 413)."""


class UnknownEndpoint(InvalidEnvironment):
    """No such path or method on the daemon's CNI API (code 4, HTTP 404)."""


class CheckFailed(CNIError):
    """CHECK found the attachment missing or unlike its prevResult (code 104)."""


class AlreadyExists(CNIError):
    """A second ADD for the same (container id, ifname) (code 102)."""


class PodGone(CNIError):
    """The pod is not in the Kubernetes API, or its UID differs (code 103)."""


class AddressExhausted(CNIError):
    """No free address left in the pool (code 101); capacity, not a fault."""


# Temporary errors: retrying later may succeed.
class TryAgain(CNIError):
    """The daemon is unreachable, draining or busy (spec code 11)."""


class Timeout(TryAgain):
    """The operation did not finish within the client's time limit."""


class PortBindingFailed(TryAgain):
    """Neutron failed to bind the pod's port (``binding_failed``): code 11,
    never counted; the sandbox is tried again, the controller reports the
    pod (a Warning Event)."""


class OvsdbUnavailable(TryAgain):
    """Open vSwitch's database did not answer within its timeout, or the
    integration bridge is missing: code 11, never counted (readiness
    ``ovsdb`` names it; restarting the daemon cannot fix it)."""


class PortNotActive(TryAgain):
    """The pod's Neutron port did not become ACTIVE (or, on an OVN node,
    ovn-controller did not install its flows) within ADD's wait: code 11,
    never counted (the network's agent, not the node, is late)."""


class NotAvailable(CNIError):
    """STATUS: the plugin cannot take ADDs (spec code 50)."""


class LimitedConnectivity(NotAvailable):
    """STATUS: the plugin cannot take ADDs, and the pods already running
    may have lost connectivity too (spec code 51)."""


# Internal failures: the daemon itself failed; these count against the budget.
class InternalError(CNIError):
    """An unexpected failure inside the daemon (code 100)."""


class PlumbingError(InternalError):
    """Creating or moving interfaces, addresses or routes failed (code 100)."""


class IpamStoreError(InternalError):
    """The allocation store could not be read or written (code 100)."""


# Persistent environment faults: every ADD would fail the same way and no
# restart fixes them. They fail readiness naming the cause (the Server sets
# the shared-state Fault bit named by ``fault``) and never count against the
# budget, which would only get the daemon restarted into the same fault.
class EnvironmentFault(CNIError):
    """A fault of the node, not of the request or the daemon (code 105)."""

    #: name of the :class:`kuryr_supervisor.state.Fault` bit it raises
    fault = ""


class StoreCorrupt(EnvironmentFault):
    """The IPAM store is corrupt or not a database."""

    fault = "IPAM_STORE"


class StoreUnwritable(EnvironmentFault):
    """The state directory is full, read-only or not permitted."""

    fault = "DISK_FULL"


class BridgeConflict(EnvironmentFault):
    """The configured bridge name is a link of another kind."""

    fault = "BRIDGE_KIND"


class NoNetAdmin(EnvironmentFault):
    """Netlink refused the change: CAP_NET_ADMIN is missing."""

    fault = "NET_ADMIN"


@dataclasses.dataclass(frozen=True)
class Wire:
    code: int
    http_status: int
    counts_as_failure: bool
    temporary: bool


WIRE: dict[type[CNIError], Wire] = {
    IncompatibleVersion: Wire(1, 400, False, False),
    UnsupportedField: Wire(2, 400, False, False),
    ContainerUnknown: Wire(3, 404, False, False),
    InvalidEnvironment: Wire(4, 400, False, False),
    UnknownEndpoint: Wire(4, 404, False, False),
    DecodeError: Wire(6, 400, False, False),
    RequestTooLarge: Wire(6, 413, False, False),
    InvalidConfig: Wire(7, 400, False, False),
    TryAgain: Wire(11, 503, False, True),
    NotAvailable: Wire(50, 503, False, True),
    LimitedConnectivity: Wire(51, 503, False, True),
    InternalError: Wire(100, 500, True, True),
    AddressExhausted: Wire(101, 507, False, True),
    AlreadyExists: Wire(102, 409, False, False),
    PodGone: Wire(103, 409, False, False),
    CheckFailed: Wire(104, 409, False, False),
    EnvironmentFault: Wire(105, 503, False, True),
    CNIError: Wire(100, 500, True, True),
}
