"""The reference evaluator against the cases the Kubernetes documentation
spells out (concepts/services-networking/network-policies, the
NetworkPolicy API reference and the upstream e2e classes): each case
checks a connection the text says is allowed and one it says is not, so
an evaluator that allows or refuses everything fails every case."""
from __future__ import annotations

from tests.fixtures.netpol.objects import labels, namespace, pod, policy
from tests.fixtures.netpol.reference import allowed

NSS = [namespace("default"), namespace("myproject", project="myproject"),
       namespace("other", team="other")]
A = pod("default", "a", "10.0.0.1", {"role": "db"},
        [("serve-80", 80), ("dns", 53, "UDP")])
B = pod("default", "b", "10.0.0.2", {"role": "frontend"},
        [("serve-80", 8080)])
C = pod("myproject", "c", "10.0.1.3", {"role": "frontend"})
D = pod("myproject", "d", "10.0.1.4", {"role": "backend"})
E = pod("other", "e", "10.0.2.5", {"role": "frontend"}, node="node-2")
PODS = [A, B, C, D, E]
OUT = "172.17.0.9"


def ok(pols: list, src: object, dst: str, port: int = 80,
       proto: str = "TCP", **kw: object) -> bool:
    return allowed(pols, PODS, NSS, src, dst, port, proto, **kw)  # type: ignore[arg-type]


def test_no_policy_allows_everything() -> None:
    assert ok([], B, "10.0.0.1") and ok([], OUT, "10.0.2.5", 9, "UDP")
    assert ok([], E, "8.8.8.8", 53, "UDP")


def test_default_deny_ingress() -> None:
    deny = [policy("default", "deny", types=["Ingress"])]
    assert not ok(deny, B, "10.0.0.1") and not ok(deny, C, "10.0.0.2")
    assert ok(deny, A, "10.0.1.3")             # egress stays open
    assert ok(deny, E, "10.0.1.4")             # another namespace's pods


def test_allow_all_ingress() -> None:
    pols = [policy("default", "deny", types=["Ingress"]),
            policy("default", "all", ingress=[{}])]
    assert ok(pols, OUT, "10.0.0.1", 5, "UDP")
    assert not ok(pols[:1], OUT, "10.0.0.1", 5, "UDP")


def test_default_deny_egress() -> None:
    deny = [policy("default", "deny", types=["Egress"])]
    assert not ok(deny, A, "10.0.1.3") and not ok(deny, A, "8.8.8.8", 53, "UDP")
    assert ok(deny, C, "10.0.0.1")             # ingress stays open


def test_allow_all_egress() -> None:
    pols = [policy("default", "deny", types=["Egress"]),
            policy("default", "all", egress=[{}], types=["Egress"])]
    assert ok(pols, A, "8.8.8.8", 53, "UDP") and not ok(pols[:1], A, "8.8.8.8")


def test_default_deny_all() -> None:
    deny = [policy("default", "deny", types=["Ingress", "Egress"])]
    assert not ok(deny, A, "10.0.0.2") and not ok(deny, C, "10.0.0.2")
    assert not ok(deny, A, "10.0.1.3") and ok(deny, C, "10.0.1.4")


# The concepts page's test-network-policy, in namespace default.
DOCS = policy("default", "test-network-policy", labels(role="db"), ingress=[{
    "from": [{"ipBlock": {"cidr": "172.17.0.0/16",
                          "except": ["172.17.1.0/24"]}},
             {"namespaceSelector": labels(project="myproject")},
             {"podSelector": labels(role="frontend")}],
    "ports": [{"protocol": "TCP", "port": 6379}]}], egress=[{
        "to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
        "ports": [{"protocol": "TCP", "port": 5978}]}],
    types=["Ingress", "Egress"])


def test_docs_example_ingress_peers() -> None:
    assert ok([DOCS], OUT, "10.0.0.1", 6379)                # in the block
    assert not ok([DOCS], "172.17.1.9", "10.0.0.1", 6379)   # in except
    assert ok([DOCS], D, "10.0.0.1", 6379)       # any pod of myproject
    assert ok([DOCS], B, "10.0.0.1", 6379)       # frontend of default
    assert not ok([DOCS], E, "10.0.0.1", 6379)   # frontend elsewhere
    assert not ok([DOCS], B, "10.0.0.1", 6380)   # another port
    assert not ok([DOCS], B, "10.0.0.1", 6379, "UDP")


def test_docs_example_egress() -> None:
    assert ok([DOCS], A, "10.0.0.2", 5978) and not ok([DOCS], A, "10.0.0.2", 80)
    assert not ok([DOCS], A, "10.0.1.3", 5978)   # outside 10.0.0.0/24
    assert ok([DOCS], B, "10.0.1.3", 1)          # B is not selected


def test_namespace_and_pod_selector_together() -> None:
    """One peer with both: frontends of myproject only."""
    both = [policy("default", "p", labels(role="db"), ingress=[{"from": [{
        "namespaceSelector": labels(project="myproject"),
        "podSelector": labels(role="frontend")}]}])]
    assert ok(both, C, "10.0.0.1") and not ok(both, D, "10.0.0.1")
    assert not ok(both, B, "10.0.0.1") and not ok(both, E, "10.0.0.1")


def test_namespace_and_pod_selector_separate() -> None:
    """Two peers: every pod of myproject, or frontends of default."""
    apart = [policy("default", "p", labels(role="db"), ingress=[{"from": [
        {"namespaceSelector": labels(project="myproject")},
        {"podSelector": labels(role="frontend")}]}])]
    assert ok(apart, C, "10.0.0.1") and ok(apart, D, "10.0.0.1")
    assert ok(apart, B, "10.0.0.1") and not ok(apart, E, "10.0.0.1")


def test_empty_namespace_selector_means_every_namespace_not_outside() -> None:
    pols = [policy("default", "p", labels(role="db"), ingress=[{"from": [
        {"namespaceSelector": {}}]}])]
    assert ok(pols, E, "10.0.0.1") and ok(pols, D, "10.0.0.1")
    assert not ok(pols, OUT, "10.0.0.1")


def test_ipblock_except_and_pod_addresses() -> None:
    pols = [policy("default", "p", labels(role="db"), ingress=[{"from": [
        {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}}]}])]
    assert ok(pols, E, "10.0.0.1")               # 10.0.2.5: a pod, in
    assert not ok(pols, C, "10.0.0.1")           # 10.0.1.3: excepted
    assert not ok(pols, OUT, "10.0.0.1")


def test_named_port_resolved_on_the_destination_for_ingress() -> None:
    pols = [policy("default", "p", {}, ingress=[{"ports": [
        {"port": "serve-80"}]}])]
    assert ok(pols, C, "10.0.0.1", 80) and not ok(pols, C, "10.0.0.1", 8080)
    assert ok(pols, C, "10.0.0.2", 8080) and not ok(pols, C, "10.0.0.2", 80)


def test_named_port_resolved_on_the_destination_for_egress() -> None:
    pols = [policy("myproject", "p", {}, egress=[{"ports": [
        {"port": "serve-80"}]}])]
    assert ok(pols, C, "10.0.0.2", 8080) and not ok(pols, C, "10.0.0.2", 80)
    assert ok(pols, C, "10.0.0.1", 80)
    assert not ok(pols, C, "8.8.8.8", 80)       # no pod: no named port


def test_named_port_needs_its_protocol() -> None:
    pols = [policy("default", "p", labels(role="db"), ingress=[{"ports": [
        {"port": "dns", "protocol": "UDP"}]}])]
    assert ok(pols, C, "10.0.0.1", 53, "UDP") and not ok(pols, C, "10.0.0.1", 53)
    tcp = [policy("default", "p", labels(role="db"), ingress=[{"ports": [
        {"port": "dns"}]}])]
    assert not ok(tcp, C, "10.0.0.1", 53, "UDP")
    assert not ok(tcp, C, "10.0.0.1", 53)      # dns is UDP's, not TCP's


def test_end_port_range() -> None:
    """The docs' multi-port egress: TCP 32000 to 32768."""
    pols = [policy("default", "p", labels(role="db"), egress=[{
        "to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
        "ports": [{"protocol": "TCP", "port": 32000, "endPort": 32768}]}],
        types=["Egress"])]
    for port, want in ((31999, False), (32000, True), (32768, True),
                       (32769, False)):
        assert ok(pols, A, "10.0.0.2", port) is want, port


def test_policy_types_inferred_from_egress_rules() -> None:
    pols = [policy("default", "p", labels(role="db"), egress=[{"to": [
        {"podSelector": labels(role="frontend")}]}])]
    assert ok(pols, A, "10.0.0.2") and not ok(pols, A, "10.0.1.4")
    assert not ok(pols, B, "10.0.0.1")           # Ingress too, no rules


def test_policy_types_inferred_without_egress_rules() -> None:
    pols = [policy("default", "p", labels(role="db"), egress=[])]
    assert ok(pols, A, "10.0.1.4") and not ok(pols, B, "10.0.0.1")


def test_policy_types_given_ignore_other_rules() -> None:
    pols = [policy("default", "p", labels(role="db"), ingress=[],
                   egress=[{"to": [{"podSelector": {}}]}], types=["Egress"])]
    assert ok(pols, C, "10.0.0.1")               # not isolated for ingress
    assert not ok(pols, A, "10.0.1.3") and ok(pols, A, "10.0.0.2")


def test_policies_are_additive() -> None:
    one = policy("default", "one", labels(role="db"), ingress=[{"ports": [
        {"port": 80}]}])
    two = policy("default", "two", labels(role="db"), ingress=[{"ports": [
        {"port": 443}]}])
    assert ok([one, two], C, "10.0.0.1", 443) and not ok([one], C, "10.0.0.1", 443)
    assert not ok([one, two], C, "10.0.0.1", 22)


def test_a_policy_isolates_only_what_it_selects_in_its_namespace() -> None:
    pols = [policy("default", "deny", labels(role="db"), types=["Ingress"])]
    assert not ok(pols, C, "10.0.0.1") and ok(pols, C, "10.0.0.2")
    elsewhere = [policy("other", "deny", labels(role="db"), types=["Ingress"])]
    assert ok(elsewhere, C, "10.0.0.1") and not ok(pols, E, "10.0.0.1")


def test_pod_selector_alone_means_the_policy_namespace() -> None:
    pols = [policy("default", "p", labels(role="db"), ingress=[{"from": [
        {"podSelector": labels(role="frontend")}]}])]
    assert ok(pols, B, "10.0.0.1") and not ok(pols, C, "10.0.0.1")


def test_match_expressions() -> None:
    def sel(op: str, *values: str) -> dict:
        e: dict = {"key": "role", "operator": op}
        if values:
            e["values"] = list(values)
        return {"matchExpressions": [e]}
    for selector, admitted, refused in (
            (sel("In", "frontend", "x"), C, D),
            (sel("NotIn", "frontend"), D, C),
            (sel("Exists"), C, None),
            (sel("DoesNotExist"), None, C)):
        pols = [policy("default", "p", labels(role="db"), ingress=[{"from": [
            {"namespaceSelector": {}, "podSelector": selector}]}])]
        if admitted is not None:
            assert ok(pols, admitted, "10.0.0.1"), selector
        if refused is not None:
            assert not ok(pols, refused, "10.0.0.1"), selector
    nolabel = pod("default", "n", "10.0.0.9")
    pols = [policy("default", "p", labels(role="db"), ingress=[{"from": [
        {"podSelector": sel("DoesNotExist")}]}])]
    assert allowed(pols, [*PODS, nolabel], NSS, nolabel, "10.0.0.1", 80, "TCP")


def test_both_ends_must_allow() -> None:
    out = policy("default", "out", labels(role="frontend"), types=["Egress"])
    into = policy("default", "in", labels(role="db"), ingress=[{}])
    assert not ok([out, into], B, "10.0.0.1") and ok([into], B, "10.0.0.1")


def test_protocol_defaults_to_tcp_and_a_port_can_be_left_out() -> None:
    pols = [policy("default", "p", labels(role="db"), ingress=[{"ports": [
        {"port": 53}, {"protocol": "UDP"}]}])]
    assert ok(pols, C, "10.0.0.1", 53) and ok(pols, C, "10.0.0.1", 9999, "UDP")
    assert not ok(pols, C, "10.0.0.1", 54) and not ok(pols, C, "10.0.0.1", 53, "SCTP")


def test_sctp() -> None:
    pols = [policy("default", "p", labels(role="db"), ingress=[{"ports": [
        {"port": 9, "protocol": "SCTP"}]}])]
    assert ok(pols, C, "10.0.0.1", 9, "SCTP") and not ok(pols, C, "10.0.0.1", 9)


def test_the_pods_own_node_is_never_refused() -> None:
    deny = [policy("default", "deny", types=["Ingress", "Egress"])]
    nodes = {"node-1": "192.168.0.1", "node-2": "192.168.0.2"}
    assert ok(deny, "192.168.0.1", "10.0.0.1", nodes=nodes)
    assert ok(deny, A, "192.168.0.1", nodes=nodes)
    assert not ok(deny, "192.168.0.2", "10.0.0.1", nodes=nodes)


def test_invalid_parts_match_nothing() -> None:
    pols = [policy("default", "p", labels(role="db"), ingress=[{"ports": [
        {"port": 80, "protocol": "ICMP"}]}])]
    assert not ok(pols, C, "10.0.0.1") and ok(pols, C, "10.0.0.2")
