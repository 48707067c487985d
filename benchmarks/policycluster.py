"""The policy benchmark's cluster: the fake Kubernetes API, the controller
daemon (``neutron_port`` and ``network_policy``) on the OVN stack's
Neutron, pods (their ports made by the port handler; two plugged and
answering), the benchmark's policies, and the Neutron calls its
references make by hand. Everything it made goes in :meth:`close`."""
from __future__ import annotations

import ipaddress
from typing import Any

from benchmarks.context import Context
from benchmarks.policywatch import Crashes

NS = "bench"
SELECTED = {"app": "web", "role": "client"}


def _cidrs(block: dict[str, Any]) -> list[Any]:
    """An ipBlock as the CIDRs Neutron can hold (no except: the block
    less its excepts), as any scheme must write it."""
    left = [ipaddress.ip_network(block["cidr"], strict=False)]
    for cut in block.get("except") or []:
        cut = ipaddress.ip_network(cut, strict=False)
        left = [piece for net in left for piece in (
            net.address_exclude(cut) if cut.subnet_of(net) else [net])]
    return left


def per_pod_ip_rules(api: Any) -> dict[str, int]:
    """Per NetworkPolicy, the rules a per-pod-IP scheme needs: one per
    peer (a pod's address, each CIDR of an ipBlock less its excepts) and
    port entry (one when none), from the API's objects."""
    from tests.fixtures.netpol.reference import selects
    pods = [p for p in api.pods.values() if p.get("status", {}).get("podIP")]
    nss = {o["metadata"]["name"]: o for o in api.namespace_objects.values()}
    out: dict[str, int] = {}
    for (ns, name), pol in api.networkpolicies.items():
        total = 0
        for field, key in (("ingress", "from"), ("egress", "to")):
            for rule in pol["spec"].get(field) or []:
                peers = 0
                for peer in rule.get(key) or []:
                    if "ipBlock" in peer:
                        peers += len(_cidrs(peer["ipBlock"]))
                        continue
                    for pod in pods:
                        pns = pod["metadata"]["namespace"]
                        if "namespaceSelector" in peer:
                            if not selects(peer["namespaceSelector"],
                                           nss[pns]["metadata"]["labels"]):
                                continue
                        elif pns != ns:
                            continue
                        if selects(peer.get("podSelector") or {},
                                   pod["metadata"].get("labels") or {}):
                            peers += 1
                total += max(1, peers) * max(1, len(rule.get("ports") or []))
        out[name] = total
    return out


class Cluster:
    """See the module."""

    SELECTED = SELECTED

    def __init__(self, ctx: Context, stack: Any) -> None:
        from tests.fixtures.fakeapi import FakeAPI
        self.ctx, self.stack = ctx, stack
        self.api = FakeAPI().start()
        self.tmp = ctx.ws.tmp / "policy"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.tag = f"kuryr-supervisor:{self.api.namespaces['kube-system']}"
        self.daemon: Any = None
        self.pods: Any = None
        self.made: list[str] = []       # Neutron paths to delete
        self.defaults: list[str] = []
        self.server = self.client = None
        self.count = 0
        self.quotas: dict[str, int] = {}
        self.crashes: Crashes | Any = None

    def start(self) -> None:
        from tests.fixtures.clouds import controller_options
        from tests.fixtures.daemon import Daemon
        from tests.fixtures.netpol.ovnpods import PolicyPods, set_quotas
        stack = self.stack
        self.quotas = set_quotas(stack, {"security_group": 100,
                                         "security_group_rule": 2000})
        self.api.add_namespace(NS, {"team": "x"})
        self.daemon = Daemon(self.tmp, controller_options(
            stack.cloud, self.api.url,
            neutron=dict(stack.cloud.conf_overrides(),
                         endpoint_override=stack.url),
            controller={"handlers": "neutron_port,network_policy",
                        "pod_network_id": stack.network_id,
                        "pod_subnet_id": stack.subnet_id},
            network_policy={"resync_interval": 60.0}))
        self.daemon.start()
        self.daemon.wait_ready(120)
        self.pods = PolicyPods(stack, self.api, self.daemon.log)
        self.crashes = Crashes(stack)

    def writes(self) -> dict[str, float]:
        from tests.fixtures.netpol.ovnpods import writes_by_kind
        return writes_by_kind(self.daemon)

    def total(self) -> float:
        return sum(self.writes().values())

    def settle(self, what: str, before: float | None = None) -> None:
        """Wait for the handler to have applied a change (``before``: its
        writes before it, when it needs some)."""
        from tests.fixtures.netpol.ovnpods import settle
        settle(self.daemon, self.stack, self.api, what, before=before,
               quiet=2.0)

    # -- pods --------------------------------------------------------------
    def _add(self, count: int, labels: dict[str, str]) -> list[Any]:
        from tests.fixtures.ovn.stack import wait_for
        api = self.api
        keys = []
        for _ in range(count):
            self.count += 1
            key = (NS, f"pod-{self.count}")
            api.add_pod(*key, f"{self.stack.fabric.nodes[self.count % 2].name}")
            api.modify_pod(*key, labels=dict(labels))
            keys.append(key)
        wait_for(lambda: all(k in api.podports for k in keys), 300,
                 "the pods' PodPorts")
        with api.cond:
            for key in keys:
                ip = api.podports[key]["spec"]["address"].split("/")[0]
                obj = api.pods[key]
                obj["status"] = {"phase": "Running", "podIP": ip,
                                 "podIPs": [{"ip": ip}]}
                api._record("MODIFIED", obj)
        return keys

    def selected_pods(self, total: int) -> None:
        have = sum(1 for p in self.api.pods.values()
                   if p["metadata"].get("labels") == SELECTED)
        if total > have:
            self._add(total - have, SELECTED)

    def address(self, key: Any) -> str:
        return str(self.api.podports[key]["spec"]["address"]).split("/")[0]

    def peer_sets_of(self, key: Any) -> int:
        """The address groups of the cluster holding the pod's address."""
        address = f"{self.address(key)}/32"
        groups = self.stack.admin("GET", "/v2.0/address-groups",
                                  description=self.tag).expect(200)[
            "address_groups"]
        return sum(1 for g in groups if address in g["addresses"])

    def spare_pods(self, count: int) -> list[Any]:
        return self._add(count, {"app": "spare"})

    def plugged(self) -> tuple[Any, Any]:
        nodes = self.stack.fabric.nodes
        http = [("http", 80, "TCP")]
        self.server = self.pods.make(NS, "server", nodes[0],
                                     {"role": "server"}, http)
        self.client = self.pods.make(NS, "client", nodes[1], {}, http)
        self.defaults = list(self.stack.port(self.server.port_id)[
            "security_groups"])
        return self.server, self.client

    def client_labels(self, labels: dict[str, str]) -> None:
        self.api.modify_pod(NS, "client", labels=dict(labels))

    # -- policies ----------------------------------------------------------
    def size_policies(self) -> dict[str, str]:
        api, cidr = self.api, self.stack.cidr
        base = cidr.rsplit(".", 1)[0]
        specs = {
            "from-clients": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {
                    "role": "client"}}}],
                    "ports": [{"port": 80}, {"port": 443}]}]},
            "ns-and-blocks": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [
                    {"namespaceSelector": {"matchLabels": {"team": "x"}},
                     "podSelector": {"matchLabels": {"role": "client"}}},
                    {"ipBlock": {"cidr": "10.0.0.0/8", "except": [
                        f"{base}.0/26", f"{base}.64/27"]}}],
                    "ports": [{"port": 8080}]}]},
            "egress-clients": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"podSelector": {"matchLabels": {
                    "role": "client"}}}],
                    "ports": [{"port": 5432},
                              {"port": 53, "protocol": "UDP"}]}]}}
        return {name: api.put_networkpolicy(NS, name, spec)["metadata"]["uid"]
                for name, spec in specs.items()}

    def rules_of(self, uids: dict[str, str]) -> dict[str, int]:
        """Per policy, the rules of the security groups named after it."""
        groups = self.stack.admin("GET", "/v2.0/security-groups",
                                  tags=self.tag).expect(200)["security_groups"]
        return {name: sum(len(g["security_group_rules"]) for g in groups
                          if uid in g["name"])
                for name, uid in uids.items()}

    def put_server_policy(self, name: str) -> None:
        self.api.put_networkpolicy(NS, name, {
            "podSelector": {"matchLabels": {"role": "server"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {
                "role": "peer"}}}], "ports": [{"port": 80}]}]})

    def delete_server_policy(self, name: str) -> None:
        self.api.delete_networkpolicy(NS, name)

    # -- the references' Neutron calls by hand -----------------------------
    def _post(self, path: str, kind: str, body: dict[str, Any]) -> str:
        body = dict(body, project_id=self.stack.cloud.project_id)
        made = self.stack.admin("POST", path, {kind: body}).expect(201)[kind]
        self.made.append(f"{path}/{made['id']}")
        return str(made["id"])

    def deny_group(self) -> str:
        return self._post("/v2.0/security-groups", "security_group",
                          {"name": "bench-deny"})

    def reference_groups(self) -> tuple[str, str]:
        ag = self._post("/v2.0/address-groups", "address_group",
                        {"name": "bench-ref", "addresses": []})
        group = self._post("/v2.0/security-groups", "security_group",
                           {"name": "bench-ref"})
        self.stack.admin("POST", "/v2.0/security-group-rules", {
            "security_group_rule": {
                "security_group_id": group, "direction": "ingress",
                "ethertype": "IPv4", "protocol": "tcp",
                "port_range_min": 80, "port_range_max": 80,
                "remote_address_group_id": ag}}).expect(201)
        self.made.insert(0, self.made.pop())    # the group before its AG
        return group, ag

    def server_groups(self, groups: list[str] | None) -> None:
        assert self.server is not None
        self.stack.admin("PUT", f"/v2.0/ports/{self.server.port_id}", {
            "port": {"security_groups": groups or self.defaults}}).expect(200)

    def ag_members(self, ag: str, *, add: str = "", remove: str = "") -> None:
        action, address = ("add", add) if add else ("remove", remove)
        self.stack.admin(
            "PUT", f"/v2.0/address-groups/{ag}/{action}_addresses",
            {"addresses": [f"{address}/32"]}).expect(200)

    def close(self) -> None:
        """Everything undone, each step even when one before failed (the
        first failure raised after)."""
        import contextlib

        from tests.fixtures.netpol.ovnpods import set_quotas
        from tests.fixtures.ovn.stack import wait_for
        with contextlib.ExitStack() as undo:
            if self.quotas:
                undo.callback(set_quotas, self.stack, self.quotas)
            for path in reversed(self.made):
                undo.callback(lambda p=path: self.stack.admin(
                    "DELETE", p).expect(204, 404))
            undo.callback(self.api.stop)
            if self.daemon is not None:
                undo.callback(self.daemon.close)
                undo.callback(lambda: wait_for(
                    lambda: not self.api.podports, 120,
                    "the pods' PodPorts gone"))
                undo.callback(lambda: wait_for(
                    lambda: not self.stack.admin(
                        "GET", "/v2.0/security-groups", tags=self.tag
                    ).expect(200)["security_groups"], 120,
                    "the policies' security groups gone"))
            undo.callback(self._forget)
            if self.pods is not None:
                undo.callback(self.pods.close)
                if self.server is not None:
                    undo.callback(self.server_groups, None)

    def _forget(self) -> None:
        with self.api.cond:
            for key in list(self.api.networkpolicies):
                self.api.delete_networkpolicy(*key)
            for key in list(self.api.pods):
                self.api.delete_pod(*key)
