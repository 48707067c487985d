"""The CNI socket's address parsing, the trust rule for its directories
and the TCP probe preflight and check-config share."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from kuryr_supervisor.cni import sockets


@pytest.mark.parametrize(("address", "expected"), [
    ("unix:///run/k/cni.sock", ("/run/k/cni.sock", -1)),
    ("unix:/run/k/cni.sock", ("/run/k/cni.sock", -1)),
    ("127.0.0.1:5036", ("127.0.0.1", 5036)),
    ("tcp://[::1]:5036", ("::1", 5036)),
])
def test_addresses(address: str, expected: tuple[str, int]) -> None:
    assert sockets.parse_address(address) == expected


@pytest.mark.parametrize("address", ["unix://run/k.sock", "unix:run/k.sock",
                                     "unix://", "localhost", "h:99999"])
def test_relative_or_broken_addresses_are_refused(address: str) -> None:
    with pytest.raises(ValueError):
        sockets.parse_address(address)


@pytest.mark.privileged
def test_trust_follows_every_directory_up_to_root(tmp_path: Path) -> None:
    run = tmp_path / "a" / "run"
    run.mkdir(parents=True)
    sockets.check_trusted(str(run / "cni.sock"))          # root, 0755: fine
    sockets.check_trusted(str(run / "new" / "cni.sock"))  # made 0700 later
    (tmp_path / "a").chmod(0o775)
    with pytest.raises(sockets.UntrustedPath, match="writable by group"):
        sockets.check_trusted(str(run / "cni.sock"))
    (tmp_path / "a").chmod(0o1777)           # sticky ancestor, like /tmp
    sockets.check_trusted(str(run / "cni.sock"))
    run.chmod(0o1777)                        # but never the socket's own dir
    with pytest.raises(sockets.UntrustedPath, match="writable"):
        sockets.check_trusted(str(run / "cni.sock"))
    run.chmod(0o700)
    os.chown(run, 65534, 65534)
    with pytest.raises(sockets.UntrustedPath, match="owned by uid 65534"):
        sockets.check_trusted(str(run / "cni.sock"))
    link = tmp_path / "link"
    link.symlink_to(run)                     # judged where it leads
    with pytest.raises(sockets.UntrustedPath, match="owned by uid 65534"):
        sockets.check_trusted(str(link / "cni.sock"))


def test_a_tcp_probe_meets_what_a_bind_would_and_holds_nothing() -> None:
    """The one probe preflight and check-config share: a held port is
    EADDRINUSE, a free one is left free, and an address the host does not
    have is the bind's own refusal."""
    with sockets.bind_tcp("127.0.0.1", 0) as held:
        port = held.getsockname()[1]
        with pytest.raises(OSError) as taken:
            sockets.probe_tcp("127.0.0.1", port)
        assert taken.value.errno == errno.EADDRINUSE
    sockets.probe_tcp("127.0.0.1", port)
    sockets.bind_tcp("127.0.0.1", port).close()   # the probe kept nothing
    with pytest.raises(OSError) as foreign:
        sockets.probe_tcp("192.0.2.1", port)       # TEST-NET-1: not ours
    assert foreign.value.errno == errno.EADDRNOTAVAIL
