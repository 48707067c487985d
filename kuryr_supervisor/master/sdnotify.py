"""systemd's notify protocol (sd_notify), standard library only.

The master captures ``NOTIFY_SOCKET`` (and the watchdog variables) before
cotyledon starts: cotyledon would otherwise send ``READY=1`` as soon as the
master runs and delete the variable. kuryr-supervisor sends ``READY=1`` only
when the daemon first becomes ready, ``WATCHDOG=1`` only while it is alive,
``STATUS=`` when the one-line summary changes and ``STOPPING=1`` on shutdown.
Workers never see the variables, so nothing else speaks for the daemon.
"""
from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping

LOG = logging.getLogger(__name__)


class Notifier:
    """Sends notifications to systemd; every method is a no-op without it."""

    def __init__(self, address: str | None, *,
                 watchdog_usec: int | None = None) -> None:
        self._address = address
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None

    @classmethod
    def from_environment(
            cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """Take the notify variables out of ``environ`` (default os.environ)."""
        env = os.environ if environ is None else environ
        address = env.pop("NOTIFY_SOCKET", None) or None
        usec_text = env.pop("WATCHDOG_USEC", "")
        pid_text = env.pop("WATCHDOG_PID", "")
        usec: int | None = None
        if usec_text.isdigit() and int(usec_text) > 0:
            if not pid_text or pid_text == str(os.getpid()):
                usec = int(usec_text)
        return cls(address, watchdog_usec=usec)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between pings: half the watchdog timeout, as systemd advises."""
        if not self.watchdog_usec:
            return None
        return self.watchdog_usec / 2_000_000

    def notify(self, *lines: str) -> bool:
        """Send ``KEY=value`` lines in one datagram; False when not delivered."""
        if self._address is None:
            return False
        target = self._address
        if target.startswith("@"):
            target = "\0" + target[1:]
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            self._sock.sendto("\n".join(lines).encode("utf-8"), target)
        except OSError as exc:
            LOG.debug("systemd notification %s not delivered: %s", lines, exc)
            return False
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
