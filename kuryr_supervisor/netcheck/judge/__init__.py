"""The judge's side of network health: the network judge (the
controller's ``network_health`` handler) and the canaries
(``network_canary``), rooms of the controller built on its handler
runtime (:mod:`kuryr_supervisor.controller.runtime`) like the others.

- :mod:`.judge`: the rules, a pure function of the records and the clock;
- :mod:`.reach`: who is to blame for failed probes between nodes;
- :mod:`.records`: every node's NodeNetwork record as observed (list, watch);
- :mod:`.nodes`: the Node conditions written from the verdicts;
- :mod:`.report`: the verdicts told (Events, metrics);
- :mod:`.verdictspecs`: the cluster's verdict written into every record;
- :mod:`.handler`: the handler that runs them, on the leader only;
- :mod:`.canaryports`, :mod:`.peers`, :mod:`.canary`: a canary port per
  node in Neutron, the probing shared out, the handler that keeps them;
- :mod:`.specrelease`: a handler's part of the records taken out when the
  controller is uninstalled.
"""
