"""Port pools (``[vif_pool]``): Neutron ports made ahead per node, handed
to pods at once.

- :mod:`.portpools`: the pools, who takes which free port, the figures;
- :mod:`.refill`: the background thread that refills and gives back;
- :mod:`.nodes`: which nodes get a pool;
- :mod:`.claims`: a taken port's Neutron update, made in the background;
- :mod:`.poolports`: what a pool port is, and the pools' Neutron calls;
- :mod:`.records`: a pool's key, a pool, what serving pods gave.
"""
