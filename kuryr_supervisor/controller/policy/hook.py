"""A one-shot form of what the port handler's guard does
(:mod:`kuryr_supervisor.controller.ports.guard`, which caches the group
ids and makes the port in the groups that exist when one is missing): the
security groups a new pod's port should be made (or a pooled port
claimed) with, so that the pod never admits more than its policies
allow, even before the network_policy handler's next pass.

The port handler runs in a process of its own and knows neither the
policy handler's book nor its inventory: :func:`new_port_groups` needs
only the pod, the cluster's NetworkPolicies (its own list or watch) and
one Neutron list of the cluster's policy groups (by tags), and answers
group ids. A group the policy handler has not made yet is
:class:`NotMadeYet`: the port is then better made in no group of the
pod's policies than in the default groups, the caller's choice (waiting,
or the handler's ``open`` groups left out). The pod's address joins the
address groups its policies' peers name through the policy handler
(:func:`.desired.address_groups_of` says which).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kuryr_supervisor.controller.policy import spec
from kuryr_supervisor.controller.policy.desired import port_groups
from kuryr_supervisor.controller.policy.naming import POLICY_TAG, Naming


class NotMadeYet(LookupError):
    """A group the pod's port needs is not in Neutron yet (the policy
    handler has not passed since its policy came)."""


def new_port_groups(api: Any, naming: Naming, pod: Mapping[str, Any],
                    policies: Iterable[Mapping[str, Any]]
                    ) -> tuple[str, ...] | None:
    """The group ids of ``pod``'s new port (None: the default groups: no
    policy selects it); ``pod`` and ``policies`` the API's objects."""
    wanted = port_groups(spec.pod(pod), [spec.policy(p) for p in policies],
                         naming)
    if wanted is None:
        return None
    made = {g.name: g.id for g in api.policy_groups(naming.cluster_tag,
                                                     POLICY_TAG)}
    missing = [name for name in wanted if name not in made]
    if missing:
        raise NotMadeYet(f"security groups not made yet: {', '.join(missing)}")
    return tuple(made[name] for name in wanted)
