"""The User-Agent every request of this daemon carries: which replica sent it.

``kuryr-supervisor/<version> (<role>; <name>; pid <pid>)``, for example
``kuryr-supervisor/1.4.0 (controller; kuryr-controller-7d9f-x2; pid 1)``.
Neutron's and the API server's access logs then tell the replicas of a
controller Deployment (or the nodes' CNI daemons) apart, and show that a
standby sends no write while it waits for the Lease.

- ``<name>``: a controller replica's pod name (``POD_NAME``) or else its
  host name, as in its Lease identity (``<name>_<pid>``); a CNI daemon's
  node name.
- ``<pid>``: the master's pid, shared by all the replica's workers (so a
  restarted handler keeps its replica's name, and the pair matches the
  Lease's ``holderIdentity``). It is a value passed down, never held
  here: the master hands it to each worker it forks, a worker to the
  adapters it builds (``master_pid=``); a process without a master (a
  tool, the master itself) passes None and is named by its own pid.

Both adapters (OpenStack, Kubernetes) set it once, when their client is
built. Standard library only: the bottom layer, imported by both.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from kuryr_supervisor.version import version

PRODUCT = "kuryr-supervisor"


def replica_name(environ: Mapping[str, str] = os.environ) -> str:
    """A controller replica's name: its pod's (Deployment pods get their
    name in ``POD_NAME``), else the host's."""
    return environ.get("POD_NAME") or socket.gethostname()


def for_role(role: str, node: str, master_pid: int | None,
             environ: Mapping[str, str] = os.environ) -> str:
    """The header of a daemon of ``role``: a controller replica named as
    in its Lease, a CNI daemon by the node it serves (``node``);
    ``master_pid``: its master's (None: this process is its own)."""
    return user_agent(role, replica_name(environ) if role == "controller"
                      else node,
                      os.getpid() if master_pid is None else master_pid)


def user_agent(role: str, name: str, master_pid: int) -> str:
    """The header's value; ``name`` is stripped of what a header or the
    comment syntax cannot hold (a hostile or odd host name stays one
    token)."""
    safe = "".join(c for c in name if c.isprintable() and c not in "();\\")
    return (f"{PRODUCT}/{version()} ({role}; {safe.strip() or '-'}; "
            f"pid {master_pid})")
