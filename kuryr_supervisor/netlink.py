"""The only module that imports pyroute2.

Handles are short-lived (opened per operation, closed after), so no worker
holds netlink state across a fork or a hang.
"""
from __future__ import annotations

from pyroute2 import IPRoute


class NetlinkError(Exception):
    """A netlink operation failed; ``errno`` is kept when known."""

    def __init__(self, msg: str, errno: int | None = None) -> None:
        super().__init__(msg)
        self.errno = errno


def probe() -> None:
    """Prove netlink is usable: open an IPRoute socket and read the loopback.

    Used by the liveness check (the replacement of Kuryr's IPDB-per-probe).
    """
    try:
        with IPRoute() as ipr:
            if not ipr.link_lookup(ifname="lo"):
                raise NetlinkError("netlink answered but has no 'lo' link")
    except NetlinkError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure is "unusable"
        raise NetlinkError(f"netlink unusable: {exc}",
                           getattr(exc, "code", None)) from exc
