"""Kubernetes Services as Octavia load balancers on the OVN provider (the
``services`` handler).

- :mod:`.desired`: what a Service and its EndpointSlices ask of the cloud
  (a pure function); :mod:`.subnets`: the Neutron subnet of each member;
- :mod:`.plan`: the writes that make what Octavia has what is asked (a
  pure function);
- :mod:`.book`: the Services and slices the watches hold, and which
  changed; :mod:`.inventory`: the cluster's load balancers as Octavia has
  them, their tags and names; :mod:`.cluster`: the cluster's tag, and a
  Service proven gone;
- :mod:`.jobs`, :mod:`.work`: one Service's load balancer brought to what
  it asks, one write at a time;
- :mod:`.reconcile`: which Services to look at, jobs out, outcomes in;
  :mod:`.outcomes`, :mod:`.report`: what they say (Events, figures, log);
- :mod:`.handler`: the handler's shell; :mod:`.assembly`: its build
  function (the entry point).
"""
