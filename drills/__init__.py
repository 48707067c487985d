"""Resilience drills for kuryr-supervisor: chaos, fuzz, probes (HealthManager
kills under probing), saturation, SIGTERM, slowloris, socket trust, tenant
attacks, rolling upgrade.

Each drill starts a real daemon (``tests.fixtures.daemon``: its own config,
probe port, socket, state directory, bridge and subnet), drives it the way a
container runtime does (the ``kuryr-cni`` shim, copied alone and run by the
host's ``python3``), breaks it on purpose and checks the invariants that must
survive: every CNI call answered in time with a result or a CNI error object,
nothing leaked (addresses, veths, namespaces, processes), state on disk
consistent, probes answering.

``python3 -m drills`` runs the long versions, ``--short`` the quick ones the
test suite also runs (``tests/functional/test_drills.py``). Every drill
returns a :class:`~drills.common.Report`; the run fails when any report
lists a failure.
"""
from __future__ import annotations

DRILLS = ("chaos", "fuzz", "probes", "saturation", "sigterm", "slowloris",
          "sockettrust", "tenant", "upgrade")
