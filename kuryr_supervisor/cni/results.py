"""CNI results in the caller's version: the ADD result, CHECK's expectations.

Role: the one place that knows how result objects differ between spec
versions: ``ips[].version`` exists only before 1.0.0, ``interfaces[].mtu``
only from 1.1.0; a prevResult handed to ADD is kept and appended to (its
interface indexes stay valid, ours are offset past them). And what makes
two ADDs "the same" for a replay (:func:`netconf_digest`).
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni.protocol import Request, version_key


def add_result(request: Request, *, host_ifname: str, host_mac: str,
               pod_mac: str, mtu: int, address: ipaddress.IPv4Interface,
               gateway: ipaddress.IPv4Address) -> dict[str, Any]:
    """The ADD result in the request's version, appended to any prevResult.

    ``ips[].version`` exists only before 1.0.0; ``interfaces[].mtu`` only
    from 1.1.0. Interface indexes are offset past prevResult's interfaces.
    """
    version = request.cni_version
    prev = request.prev_result or {}
    interfaces = [i for i in prev.get("interfaces", []) if isinstance(i, dict)]
    host: dict[str, Any] = {"name": host_ifname, "mac": host_mac}
    pod: dict[str, Any] = {"name": request.ifname, "mac": pod_mac,
                           "sandbox": request.netns}
    if version_key(version) >= (1, 1, 0):
        host["mtu"] = pod["mtu"] = mtu
    interfaces += [host, pod]
    ip: dict[str, Any] = {"address": str(address), "gateway": str(gateway),
                          "interface": len(interfaces) - 1}
    if version_key(version) < (1, 0, 0):
        ip["version"] = "4"
    ips = [i for i in prev.get("ips", []) if isinstance(i, dict)] + [ip]
    routes = [r for r in prev.get("routes", []) if isinstance(r, dict)]
    routes.append({"dst": "0.0.0.0/0", "gw": str(gateway)})
    return {"cniVersion": version, "interfaces": interfaces, "ips": ips,
            "routes": routes, "dns": prev.get("dns") or request.dns}


#: Netconf keys left out of :func:`netconf_digest`, and why:
#: ``cniVersion`` -- a replay is answered in the version it asks for, the
#: attachment does not depend on it; ``prevResult`` -- earlier plugins'
#: output, volatile between a call and its retry, and appended to afresh
#: by every answer; ``runtimeConfig`` -- per-invocation runtime data
#: (port mappings, bandwidth, ...) this plugin does not act on.
VOLATILE_KEYS = frozenset({"cniVersion", "prevResult", "runtimeConfig"})


def netconf_digest(netconf: dict[str, Any]) -> str:
    """SHA-256 of the netconf in canonical JSON (sorted keys, no spaces),
    less :data:`VOLATILE_KEYS`: equal for an ADD and its retry, different
    when anything that shapes the attachment or its result (name, dns,
    ipam, args, ...) differs."""
    kept = {k: v for k, v in netconf.items() if k not in VOLATILE_KEYS}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def expected_address(request: Request) -> ipaddress.IPv4Interface:
    """CHECK: the address prevResult gave to this request's interface."""
    prev = request.prev_result or {}
    interfaces = prev.get("interfaces") or []
    for ip in prev.get("ips") or []:
        if not isinstance(ip, dict):
            continue
        index = ip.get("interface")
        if (isinstance(index, int) and 0 <= index < len(interfaces)
                and isinstance(interfaces[index], dict)
                and interfaces[index].get("name") == request.ifname
                and interfaces[index].get("sandbox") == request.netns):
            try:
                return ipaddress.IPv4Interface(ip.get("address"))
            except ValueError as exc:
                raise errors.InvalidConfig(
                    f"prevResult address {ip.get('address')!r} is invalid") from exc
    raise errors.CheckFailed(
        f"prevResult lists no address for {request.ifname} in {request.netns}")
