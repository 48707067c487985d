"""The network judge: the controller's ``network_health`` handler.

- :mod:`.judge`: the rules, a pure function of the records and the clock;
- :mod:`.reach`: who is to blame for failed probes between nodes;
- :mod:`.records`: every node's NodeNetwork record as observed (list, watch);
- :mod:`.nodes`: the Node conditions written from the verdicts;
- :mod:`.report`: the verdicts told (Events, metrics);
- :mod:`.handler`: the handler that runs them, on the leader only.
"""
