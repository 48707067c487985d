"""What the two sides of network health say to each other: the NodeNetwork
record and the judge's Node conditions, read and written by both.

- :mod:`.record`: the record's status, what the node says of its data
  plane (written by the node, checked before the judge believes it);
- :mod:`.canaryspec`: the canary's part of the record's spec, written by
  ``network_canary`` (the node's canary port, whom it probes how often);
- :mod:`.clusterspec`: the judge's part of the spec (the cluster-wide
  fault, the node's own verdict, their renewal and lapse);
- :mod:`.conditions`: the Node conditions the judge writes, which are
  ours, and what releasing them writes.

Below both sides, above the Kubernetes client (the resource's name is
:mod:`kuryr_supervisor.kubernetes.nodenetwork`'s) and the shared state.
"""
