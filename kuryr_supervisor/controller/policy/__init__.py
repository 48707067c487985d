"""Kubernetes NetworkPolicy as Neutron security groups whose rules name
address groups: the ``network_policy`` handler's pure core (the model)
and the handler that writes it to Neutron.

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

The handler (not pure): :mod:`.book` (the cluster as the watches say
it), :mod:`.inventory` (what Neutron holds), :mod:`.apply` (one pass of
writes; its steps :mod:`.portgroups` and :mod:`.sweep`, its outcome
:mod:`.tally`), :mod:`.reconcile` (when to pass), :mod:`.report` (Events,
figures), :mod:`.handler` and :mod:`.assembly` (the entry point);
:mod:`.hook`: a new pod's groups, for the port handler.
"""
