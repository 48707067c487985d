"""Leadership of the controller's handler processes: one replica writes.

- :mod:`.election`: the Lease-based leader election and its write fence;
- :mod:`.announcer`: the creates a leader has at Neutron, announced so the
  next leader waits for them instead of doubling their ports.
"""
