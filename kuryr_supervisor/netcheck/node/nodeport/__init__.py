"""The node's own port into the pod network (the OVS binding): the
Neutron port the controller made for the node (:mod:`kuryr_supervisor.
netcheck.judge.nodeports`), plugged as an OVS internal port in the node's
own namespace, so the node (its kubelet's probes) reaches its pods and
they reach it.

- :mod:`.plug`: the port on the integration bridge, its interface's MAC,
  address and routes;
- :mod:`.agent`: the spec read, the plug kept (made again when it goes
  missing, removed when the spec drops it).

It lives in the HealthManager, beside the canary, because that is the
process that already follows the node's record (:mod:`..recordfollow`)
and holds the node's OVSDB connection: a loop of its own there costs no
second watch nor connection, and no CNI request waits on it.
"""
