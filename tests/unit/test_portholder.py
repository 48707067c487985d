"""Who holds a port: /proc/net/tcp{,6} and a bounded /proc/<pid>/fd scan,
against fixture trees, and against a real socket of this process."""
from __future__ import annotations

import os
import socket
from pathlib import Path

from kuryr_supervisor.master import portholder

HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
          "retrnsmt   uid  timeout inode\n")


def row(port: int, uid: int, inode: int, state: str = "0A") -> str:
    return (f"   0: 0100007F:{port:04X} 00000000:0000 {state} 00000000:00000000 "
            f"00:00000000 00000000 {uid:5d}        0 {inode} 1 0 100 0 0 10 0\n")


def proc_tree(root: Path, tcp: str, tcp6: str = "",
              fds: dict[int, list[str]] | None = None) -> str:
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(HEADER + tcp)
    (root / "net" / "tcp6").write_text(HEADER + tcp6)
    for pid, targets in (fds or {}).items():
        (root / str(pid) / "fd").mkdir(parents=True)
        (root / str(pid) / "comm").write_text(f"proc{pid}\n")
        for n, target in enumerate(targets):
            os.symlink(target, root / str(pid) / "fd" / str(n))
    return str(root)


def test_names_the_pid_and_uid(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path, row(8090, 65534, 4242) + row(22, 0, 7),
                     fds={10: ["/dev/null", "socket:[7]"],
                          31: ["pipe:[1]", "socket:[4242]"]})
    assert portholder.tcp_holders(8090, proc=proc) == [
        portholder.Holder(65534, (31,), "proc31")]
    assert portholder.describe_tcp(8090, proc=proc) == \
        "held by pid 31 (proc31), uid 65534"


def test_time_wait_and_other_ports_are_not_holders(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path, row(8090, 0, 0, "06") + row(8091, 0, 5))
    assert portholder.tcp_holders(8090, proc=proc) == []
    assert "cannot see" in portholder.describe_tcp(8090, proc=proc)


def test_ipv6_and_no_process_found(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path, "", tcp6=row(9000, 1000, 99))
    assert portholder.describe_tcp(9000, proc=proc) == \
        "held by uid 1000 (no process found)"


def test_the_scan_is_bounded(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path, row(8090, 0, 4242),
                     fds={pid: ["/dev/null"] * 5 for pid in range(2, 12)}
                     | {99: ["socket:[4242]"]})
    found, complete = portholder.processes({4242}, proc=proc, max_fds=20)
    assert not complete and found == {4242: []}
    holders = portholder.tcp_holders(8090, proc=proc, max_fds=20)
    assert "the process scan stopped at its bound" in str(holders[0])
    clock = iter(range(100)).__next__
    _, complete = portholder.processes({4242}, proc=proc, max_seconds=3,
                                       clock=lambda: float(clock()))
    assert not complete


def test_a_real_socket_of_this_process() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert portholder.describe_tcp(port).startswith(
            f"held by pid {os.getpid()} (")
