"""Kubernetes NetworkPolicy as Neutron security groups whose rules name
address groups (the ``policy`` handler's pure core; the handler that
writes it to Neutron is to come).

- :mod:`.selectors`: label selectors, matched and put in a canonical form;
  :mod:`.spec`: NetworkPolicy, Pod and Namespace objects as the model
  reads them (every field judged, nothing raises);
- :mod:`.cidrs`: an ``ipBlock`` (a CIDR minus its ``except``) as the CIDRs
  that cover it; :mod:`.peers`: the sets of pods a rule names (address
  groups) and their members;
- :mod:`.naming`: the names and tags of what the handler owns;
- :mod:`.rules`: one policy's security-group rules (a pure function);
  :mod:`.desired`: what Neutron should hold for the whole cluster, and
  which groups a pod's port carries.
"""
