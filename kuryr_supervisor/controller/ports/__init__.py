"""The port handler (entry point ``neutron_port``): one Neutron port per pod,
announced in the pod's PodPort.

- :mod:`.handler`: the handler: the watch's events, the resync, and the
  collaborators it is composed of;
- :mod:`.book`: what the handler knows of its pods, in one record;
- :mod:`.provision`: pods given their ports (a pool's first, else made in
  bulk) and their PodPorts written;
- :mod:`.batch`: pods batched into Neutron bulk creates, a few in flight;
- :mod:`.podports`: PodPorts written a few at a time;
- :mod:`.resync`: what one port list says to do, and the sweep;
- :mod:`.verify`: a written PodPort's port the list lacks, asked for by id;
- :mod:`.gone`: a pod the list lacks confirmed gone by a consistent read;
- :mod:`.finished`: a finished pod (Succeeded, Failed) gives its port back;
- :mod:`.owned`: which ports are the controller's, what their PodPorts say,
  a gone or finished pod's release;
- :mod:`.retry`: what a failed step costs: a retry, a count, or nothing;
- :mod:`.report`: what the handler cannot fix, told (Events, fault bits);
- :mod:`.status`: a port's status carried into its PodPort;
- :mod:`.heaptrim`: freed heap handed back to the system after a relist.
"""
