"""Embedded host-local IPAM: allocation records, the store, its SQLite file."""
from kuryr_supervisor.cni.ipam.records import Allocation, PodRef
from kuryr_supervisor.cni.ipam.store import IpamStore

__all__ = ["Allocation", "IpamStore", "PodRef"]
