"""Host-local IPAM: which address a container gets, kept in SQLite.

Invariants:

* The allocation row *is* the reservation: an address is handed out only by
  the transaction that inserts its row, and the ``address`` column is
  UNIQUE, so no address is handed out twice, even if a process is killed at
  any instant (SQLite rolls an unfinished transaction back on next open).
* The network, broadcast and gateway addresses are never handed out.
* Host-local order: the search starts after the last address handed out in
  this range (a cursor kept in the same file), so a just-freed address is
  not reused at once and a late packet to it does not reach a new pod.

The file itself (connections, transactions, forks) is :mod:`.database`'s.
"""
from __future__ import annotations

import ipaddress
import logging
import sqlite3
import time

from kuryr_supervisor import errors
from kuryr_supervisor.cni.ipam import schema
from kuryr_supervisor.cni.ipam.database import Database, classify, open_existing
from kuryr_supervisor.cni.ipam.records import PENDING, PLUMBED, Allocation, Plumbing, PodRef

LOG = logging.getLogger(__name__)

_COLUMNS = ("container_id, ifname, address, prefixlen, gateway, netns, "
            "pod_namespace, pod_name, pod_uid, created, state")
_ALL = (_COLUMNS + ", netconf, host_ifname, host_mac, pod_mac, mtu")


def _row_to_allocation(row: tuple) -> Allocation:  # type: ignore[type-arg]
    (cid, ifname, addr, plen, gw, netns, pns, pname, puid, created, state,
     netconf, host_ifname, host_mac, pod_mac, mtu) = row
    ip = ipaddress.IPv4Address(addr)
    plumbing = (Plumbing(host_ifname, host_mac, pod_mac, int(mtu))
                if state == PLUMBED and None not in (host_ifname, host_mac,
                                                     pod_mac, mtu) else None)
    return Allocation(container_id=cid, ifname=ifname,
                      address=ipaddress.IPv4Interface(f"{ip}/{plen}"),
                      gateway=ipaddress.IPv4Address(gw), netns=netns,
                      pod=PodRef(pns, pname, puid), created=created,
                      state=state, netconf=netconf, plumbing=plumbing)


class IpamStore:
    """Allocations from one subnet, persisted in the SQLite file ``path``."""

    def __init__(self, path: str, subnet: ipaddress.IPv4Network, *,
                 gateway: ipaddress.IPv4Address | None = None,
                 range_start: ipaddress.IPv4Address | None = None,
                 range_end: ipaddress.IPv4Address | None = None) -> None:
        if subnet.prefixlen > 30:
            raise ValueError(f"subnet {subnet} is too small (max /30)")
        first, last = subnet.network_address + 1, subnet.broadcast_address - 1
        self.subnet = subnet
        self.gateway = gateway if gateway is not None else first
        self.range_start = range_start if range_start is not None else first
        self.range_end = range_end if range_end is not None else last
        for what, ip in (("gateway", self.gateway),
                         ("range_start", self.range_start),
                         ("range_end", self.range_end)):
            if not first <= ip <= last:
                raise ValueError(f"{what} {ip} is not a host of {subnet}")
        if self.range_start > self.range_end:
            raise ValueError(f"range_start {self.range_start} is after "
                             f"range_end {self.range_end}")
        self.path = path
        self._range_key = f"{self.range_start}-{self.range_end}"
        self._db = Database(path, schema.migrate)
        with self._db.transaction():  # fail early on a bad path or a bad file
            pass
        self.close()

    def allocate(self, container_id: str, ifname: str, *, netns: str,
                 pod: PodRef) -> Allocation:
        """Reserve the next free address after the last one handed out."""
        start, end = int(self.range_start), int(self.range_end)
        reserved = {int(self.gateway)}
        try:
            with self._db.transaction() as conn:
                if conn.execute(
                        "SELECT 1 FROM allocations WHERE container_id = ? "
                        "AND ifname = ?", (container_id, ifname)).fetchone():
                    raise errors.AlreadyExists(
                        f"{container_id}/{ifname} already has an address")
                used = reserved | {a for (a,) in conn.execute(
                    "SELECT address FROM allocations WHERE address "
                    "BETWEEN ? AND ?", (start, end))}
                row = conn.execute("SELECT last FROM cursors WHERE range = ?",
                                   (self._range_key,)).fetchone()
                address = _next_free(start, end, row[0] if row else end, used)
                if address is None:
                    raise errors.AddressExhausted(
                        f"no free address in {self.range_start}-"
                        f"{self.range_end} of {self.subnet}")
                created = time.time()
                conn.execute(
                    f"INSERT INTO allocations ({_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (container_id, ifname, address, self.subnet.prefixlen,
                     str(self.gateway), netns, pod.namespace, pod.name,
                     pod.uid, created, PENDING))
                conn.execute("INSERT OR REPLACE INTO cursors (range, last) "
                             "VALUES (?, ?)", (self._range_key, address))
        except sqlite3.IntegrityError as exc:
            raise errors.AlreadyExists(
                f"{container_id}/{ifname} already has an address") from exc
        except sqlite3.Error as exc:
            raise classify(exc, f"IPAM store {self.path}: allocate failed"
                           ) from exc
        allocation = Allocation(
            container_id=container_id, ifname=ifname,
            address=ipaddress.IPv4Interface(
                f"{ipaddress.IPv4Address(address)}/{self.subnet.prefixlen}"),
            gateway=self.gateway, netns=netns, pod=pod, created=created,
            state=PENDING)
        LOG.debug("allocated %s to %s/%s", allocation.address, container_id,
                  ifname)
        return allocation

    def record(self, container_id: str, ifname: str, *, netns: str,
               pod: PodRef, address: ipaddress.IPv4Interface,
               gateway: ipaddress.IPv4Address) -> Allocation:
        """Keep an address chosen elsewhere (a Neutron port) as this
        container's allocation, so DEL, CHECK, GC and reclaim treat it like
        any other. The same rules hold: one per (container, ifname), an
        address never held twice."""
        created = time.time()
        try:
            with self._db.transaction() as conn:
                conn.execute(
                    f"INSERT INTO allocations ({_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (container_id, ifname, int(address.ip),
                     address.network.prefixlen, str(gateway), netns,
                     pod.namespace, pod.name, pod.uid, created, PENDING))
        except sqlite3.IntegrityError as exc:
            raise errors.AlreadyExists(
                f"{container_id}/{ifname} already has an address, or "
                f"{address.ip} is held by another container") from exc
        except sqlite3.Error as exc:
            raise errors.IpamStoreError(
                f"IPAM store {self.path}: record failed: {exc}") from exc
        return Allocation(container_id=container_id, ifname=ifname,
                          address=address, gateway=gateway, netns=netns,
                          pod=pod, created=created, state=PENDING)

    def plumbed(self, container_id: str, ifname: str, *, netconf: str,
                plumbing: Plumbing) -> None:
        """Mark the allocation PLUMBED with what its ADD result is rendered
        from: the ADD's one write after plumbing, so a replayed ADD can be
        answered without touching the pod.

        Not fsynced (the next allocation's commit is): lost only to a power
        cut, which also takes the pod's namespace with it, and a lost mark
        leaves the row ``pending``, which a replayed ADD rolls back and DEL,
        GC and reclaim release as before. So the ADD's one extra write
        costs no extra disk flush."""
        try:
            with self._db.transaction(fsync=False) as conn:
                done = conn.execute(
                    "UPDATE allocations SET state = ?, netconf = ?, "
                    "host_ifname = ?, host_mac = ?, pod_mac = ?, mtu = ? "
                    "WHERE container_id = ? AND ifname = ?",
                    (PLUMBED, netconf, plumbing.host_ifname,
                     plumbing.host_mac, plumbing.pod_mac, plumbing.mtu,
                     container_id, ifname)).rowcount
        except sqlite3.Error as exc:
            raise classify(exc, f"IPAM store {self.path}: record plumbing "
                           "failed") from exc
        if not done:
            raise errors.IpamStoreError(
                f"{container_id}/{ifname} lost its allocation while plumbed")

    def release(self, container_id: str, ifname: str) -> Allocation | None:
        """Free the address of (container_id, ifname); None if it had none."""
        rows = self._db.query(
            f"DELETE FROM allocations WHERE container_id = ? AND ifname = ? "
            f"RETURNING {_ALL}", container_id, ifname, write=True)
        if not rows:
            return None
        allocation = _row_to_allocation(rows[0])
        LOG.debug("released %s of %s/%s", allocation.address, container_id,
                  ifname)
        return allocation

    def get(self, container_id: str, ifname: str) -> Allocation | None:
        rows = self._db.query(
            f"SELECT {_ALL} FROM allocations WHERE container_id = ? "
            "AND ifname = ?", container_id, ifname)
        return _row_to_allocation(rows[0]) if rows else None

    def list(self) -> list[Allocation]:
        """Every allocation, oldest first (including ones of other subnets)."""
        rows = self._db.query(
            f"SELECT {_ALL} FROM allocations ORDER BY created")
        return [_row_to_allocation(row) for row in rows]

    def verify(self) -> None:
        """Raise StoreCorrupt (or the classified error) unless SQLite finds
        the file sound."""
        self._db.verify()

    def close(self, *, final: bool = False) -> None:
        """Close this process's connection; ``final`` (a graceful stop)
        checkpoints the write-ahead log first and refuses later use, so the
        last process to close leaves no ``-wal`` behind."""
        self._db.close(final=final)


def _next_free(start: int, end: int, last: int, used: set[int]) -> int | None:
    """First address after ``last`` (wrapping within start..end) not used."""
    size = end - start + 1
    first = last + 1 if start <= last < end else start
    for step in range(size):
        candidate = start + (first - start + step) % size
        if candidate not in used:
            return candidate
    return None


# -- read-only figures for /metrics (the HealthManager, on its timer) ----------
def pool_size(subnet: ipaddress.IPv4Network,
              gateway: ipaddress.IPv4Address | None = None,
              range_start: ipaddress.IPv4Address | None = None,
              range_end: ipaddress.IPv4Address | None = None) -> int:
    """Addresses the store can hand out: the range less the gateway."""
    first, last = subnet.network_address + 1, subnet.broadcast_address - 1
    start, end = range_start or first, range_end or last
    gw = gateway or first
    return int(end) - int(start) + 1 - (1 if start <= gw <= end else 0)


def allocated_count(path: str) -> int:
    """Allocations in the store at ``path``; never creates the file or its
    schema, and a missing file or table counts as none (read-write and
    ``query_only``: :func:`.database.open_existing` says why)."""
    conn = open_existing(path)
    if conn is None:
        return 0
    try:
        conn.execute("PRAGMA query_only = 1")
        row = conn.execute("SELECT COUNT(*) FROM allocations").fetchone()
        return int(row[0])
    except sqlite3.Error:
        return 0
    finally:
        conn.close()
