"""Embedded host-local IPAM: allocation records, the store, its SQLite file."""
from kuryr_supervisor.cni.ipam.records import PENDING, PLUMBED, Allocation, Plumbing, PodRef
from kuryr_supervisor.cni.ipam.store import IpamStore

__all__ = ["PENDING", "PLUMBED", "Allocation", "IpamStore", "Plumbing",
           "PodRef"]
