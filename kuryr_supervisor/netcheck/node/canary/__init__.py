"""The node's canary: a Neutron port of its own (made by the controller's
``network_canary`` handler), plugged like a pod's into a namespace of the
daemon's own, from which the node probes its gateway and a sample of its
peers' canaries.

- :mod:`.netns`: the canary's namespace, held by a descriptor;
- :mod:`.plug`: the port plugged with the node's OVS binding;
- :mod:`.probes`: one round of ICMP and TCP probes, and the responder;
- :mod:`.prober`: the thread that runs a round every interval;
- :mod:`.agent`: the spec read, the plug kept, the prober aimed, the
  results handed on (the record, ``/status``, ``/metrics``).
"""
