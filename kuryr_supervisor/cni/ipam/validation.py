"""The CNI role's own check of an address chosen elsewhere.

Whatever the source of a fixed address (a PodPort today), the node binds it
only if it fits this node's configuration: the source may be wrong, stale or
forged, and what it says is put on the node's bridge and routes. So:

- the address lies inside the configured pod subnet and carries exactly the
  subnet's prefix (another prefix would re-address the bridge or move the
  node's routes to other pods);
- it is not the subnet's network, broadcast or gateway address (the gateway
  is the bridge's own address: a pod holding it captures its neighbours'
  off-node traffic);
- the gateway announced is the configured one: the bridge's address comes
  from configuration only, never from a pod;
- the MAC is a non-zero unicast MAC (the kernel would refuse it, and that
  would be counted as an internal failure);
- the MAC is not already used on the node (:func:`check_mac_free`): not
  another pod's here, not the bridge's, not any local link's -- the bridge
  would move that MAC's traffic to the new port, taking it from its owner;
- the port's pod UID is the pod's own (CNI_ARGS ``K8S_POD_UID``).

A refusal is the data's fault, not the daemon's: :class:`errors.InvalidConfig`
(code 7: the port does not fit this network's configuration) or, for another
pod's port, :class:`errors.InvalidEnvironment` (code 4: the pod named in
CNI_ARGS is not the port's); neither counts against the ADD failure budget.
It happens before anything is recorded or bound.
"""
from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping

from kuryr_supervisor import errors

_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def check_fixed(*, address: ipaddress.IPv4Interface,
                gateway: ipaddress.IPv4Address, mac: str, port_pod_uid: str,
                subnet: ipaddress.IPv4Network,
                configured_gateway: ipaddress.IPv4Address,
                pod_uid: str) -> None:
    """Raise a non-counted CNIError naming the reason, or return."""
    if port_pod_uid != pod_uid or not pod_uid:
        raise errors.InvalidEnvironment(
            f"the port is for pod UID {port_pod_uid or '(none)'}, not for "
            f"this pod's {pod_uid or '(none in CNI_ARGS)'}")
    if address.network.prefixlen != subnet.prefixlen:
        raise errors.InvalidConfig(
            f"address {address} has another prefix than the pod subnet "
            f"{subnet}")
    if address.ip not in subnet:
        raise errors.InvalidConfig(
            f"address {address} is outside the pod subnet {subnet}")
    if address.ip in (subnet.network_address, subnet.broadcast_address):
        raise errors.InvalidConfig(
            f"address {address} is the network or broadcast address of "
            f"{subnet}")
    if address.ip == configured_gateway:
        raise errors.InvalidConfig(
            f"address {address} is the node's gateway address")
    if gateway != configured_gateway:
        raise errors.InvalidConfig(
            f"gateway {gateway} is not the configured gateway "
            f"{configured_gateway}")
    check_mac(mac)


def check_mac(mac: str) -> None:
    """A non-zero unicast MAC in ``aa:bb:cc:dd:ee:ff`` form."""
    low = mac.lower()
    if not _MAC.match(low):
        raise errors.InvalidConfig(f"MAC {mac!r} is malformed")
    if low == "00:00:00:00:00:00":
        raise errors.InvalidConfig("MAC is all zeros")
    if int(low[:2], 16) & 1:
        raise errors.InvalidConfig(f"MAC {mac} is a multicast MAC")


def check_mac_free(mac: str, in_use: Mapping[str, str]) -> None:
    """Refuse ``mac`` when ``in_use`` (MAC -> who uses it) has it."""
    owner = in_use.get(mac.lower())
    if owner is not None:
        raise errors.InvalidConfig(
            f"MAC {mac} is already used on this node by {owner}")


def local_macs(sys_class_net: str = "/sys/class/net") -> dict[str, str]:
    """MAC -> ``link <name>`` for every link of this network namespace
    (the bridge, its ports, the uplinks), from sysfs: cheap and no
    netlink socket on the ADD path."""
    macs: dict[str, str] = {}
    try:
        names = os.listdir(sys_class_net)
    except OSError:
        return macs
    for name in names:
        try:
            with open(os.path.join(sys_class_net, name, "address")) as f:
                mac = f.read().strip().lower()
        except OSError:
            continue
        if mac and mac != "00:00:00:00:00:00":
            macs.setdefault(mac, f"link {name}")
    return macs
