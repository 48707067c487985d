"""The OpenStack adapter: Keystone, Neutron and Octavia as the controller
sees them.

The only importer of keystoneauth1; every failure leaves it as one of
:mod:`.wire`'s errors. Imports nothing else of the controller.

- :mod:`.adapter`: the keystoneauth sessions, the token and the transport
  (:class:`~.adapter.OpenStack`, built from ``[neutron]``);
- :mod:`.neutron`: the Neutron calls (ports, subnets, quotas) and their scope;
- :mod:`.wire`: the error taxonomy, the records and their decoding;
- :mod:`.deadline`: every call under a whole-call deadline, the caller beating;
- :mod:`.login`: when a login to Keystone may happen (renewal margin, backoff);
- :mod:`.keystone`: logins under that policy, as keystoneauth's identity plugin;
- :mod:`.sendfence`: the write fence checked before each socket write;
- :mod:`.timeouts`: every timeout, from its options, by one rule;
- :mod:`.pace`: how big a port create may be and how long it may take;
- :mod:`.making`: every port made or re-bound, through one path (binding,
  tags, MACs derived from the pods' UIDs);
- :mod:`.tagging`: tags set after a create, where Neutron drops a create's;
- :mod:`.octavia`: the Octavia calls (load balancers, listeners, pools,
  members; the ``load-balancer`` service of the catalog, over the same
  sessions), :mod:`.lbwire` their records and refusals;
- :mod:`.secgroups`, :mod:`.policycalls`, :mod:`.addrgroups`: security
  groups, their rules (in bulk) and address groups (members one call per
  change), as the nodes' ports and NetworkPolicy use them, :mod:`.sgwire`
  the policy's records and refusals.
"""
