"""The controller daemon with the ``network_policy`` handler beside the
port handler, against the fake Kubernetes API and a cloud (the fakes;
the real Keystone and Neutron with ``-m realcloud``): a NetworkPolicy's
pods get its security group on the ports the port handler made for them;
while Neutron refuses what a policy needs (its rule quota met) readiness
names Neutron (``network-policy``), liveness stays 200, the port handler
still makes ports, ``/status`` counts the policy failed; once the quota is
raised it converges and the daemon is ready again."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.clouds import AnyCloud, controller_options
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI

WEB = {"app": "web"}


def until(d: Daemon, what: str, check: Callable[[], object],
          timeout: float = 60.0) -> None:
    """Wait for ``check``; a timeout names ``what``, with the log."""
    try:
        wait_until(check, timeout)
    except (TimeoutError, AssertionError):
        raise AssertionError(f"{what} not within {timeout:.0f} s:\n"
                             f"{d.log()}") from None


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def _pod(api: FakeAPI, d: Daemon, name: str,
         labels: dict[str, str]) -> dict[str, Any]:
    """A pod the port handler gives a port; its address then in its
    status, as the kubelet writes it after the CNI ADD."""
    pod = api.add_pod("shop", name, "node-a")
    api.modify_pod("shop", name, labels=dict(labels))
    until(d, f"{name}'s PodPort", lambda: ("shop", name) in api.podports)
    address = api.podports[("shop", name)]["spec"]["address"].split("/")[0]
    with api.cond:
        pod = api.pods[("shop", name)]
        pod["status"] = {"phase": "Running", "podIP": address,
                         "podIPs": [{"ip": address}]}
        api._record("MODIFIED", pod)
    return pod


def _groups_of(cloud: AnyCloud, uid: str) -> set[str]:
    """The names of the groups of the pod's port."""
    ports = cloud.admin("GET", "/v2.0/ports", device_id=uid).expect(200)[
        "ports"]
    named = {g["id"]: g["name"] for g in cloud.admin(
        "GET", "/v2.0/security-groups").expect(200)["security_groups"]}
    return {named.get(g, g) for port in ports
            for g in port["security_groups"]}


def _rule_quota(cloud: AnyCloud, limit: int | None = None) -> int:
    """Set the project's rule quota to ``limit`` (None: to what it uses);
    the limit it had."""
    details = cloud.admin("GET", f"/v2.0/quotas/{cloud.project_id}/details"
                          ).expect(200)["quota"]["security_group_rule"]
    cloud.admin("PUT", f"/v2.0/quotas/{cloud.project_id}", {"quota": {
        "security_group_rule": int(details["used"]) if limit is None
        else limit}}).expect(200)
    return int(details["limit"])


def _ours(cloud: AnyCloud, tag: str) -> list[str]:
    """The names of the cluster's security and address groups."""
    groups = cloud.admin("GET", "/v2.0/security-groups", tags=tag).expect(
        200)["security_groups"]
    ags = cloud.admin("GET", "/v2.0/address-groups", description=tag).expect(
        200)["address_groups"]
    return sorted(g["name"] for g in [*groups, *ags])


def test_policy_beside_the_port_handler_and_a_refusing_neutron(
        tmp_path: Path, api: FakeAPI, any_cloud: AnyCloud) -> None:
    cloud = any_cloud
    tag = f"kuryr-supervisor:{api.namespaces['kube-system']}"
    api.add_namespace("shop", {"team": "shop"})
    d = Daemon(tmp_path, controller_options(
        cloud, api.url,
        controller={"handlers": "neutron_port,network_policy"},
        network_policy={"resync_interval": 5.0, "retry_max": 1.0}))
    d.start()
    try:
        d.wait_ready(60)
        code, body = d.get("/ready?verbose")
        assert code == 200 and "[+]network-policy" in body, body
        web = _pod(api, d, "web-1", WEB)
        _pod(api, d, "client-1", {"role": "client"})
        policy = api.put_networkpolicy("shop", "web", {
            "podSelector": {"matchLabels": WEB},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {
                "role": "client"}}}], "ports": [{"port": 80}]}]})
        mine = f"np:{policy['metadata']['uid']}"
        until(d, "the policy's group on the pod's port", lambda: any(
            n.endswith(mine) for n in _groups_of(cloud, web["metadata"]["uid"])))

        # Neutron refuses (the rule quota met): not ready naming it, live,
        # the port handler unaffected.
        limit = _rule_quota(cloud)
        api.put_networkpolicy("shop", "egress", {
            "podSelector": {"matchLabels": WEB}, "policyTypes": ["Egress"],
            "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]})
        until(d, "readiness naming Neutron", lambda: "[-]network-policy"
              in d.get("/ready?verbose")[1])
        assert "Neutron refuses" in d.get("/ready?verbose")[1]
        assert d.probe("/alive") == 200
        _pod(api, d, "web-2", WEB)
        status = json.loads(d.get("/status")[1])
        assert status["policies"]["failed"] == 1, status["policies"]
        _rule_quota(cloud, limit)
        d.wait_ready(60)
        until(d, "the policies applied", lambda: json.loads(
            d.get("/status")[1])["policies"] == {
                "applied": 2, "pending": 0, "failed": 0, "neutron": "ok"})
        failed = [e for e in api.core_events.values()
                  if e["reason"] == "PolicyFailed"]
        assert failed and failed[0]["involvedObject"]["name"] == "egress"
        # Both deleted at once: nothing left, no error.
        with api.cond:
            api.delete_networkpolicy("shop", "web")
            api.delete_networkpolicy("shop", "egress")
        until(d, "nothing left", lambda: _ours(cloud, tag) == [])
        for name in ("web-1", "web-2", "client-1"):
            api.delete_pod("shop", name)
        until(d, "the pods' PodPorts gone", lambda: not api.podports)
        text = d.log()
        assert "Traceback" not in text and " ERROR " not in text
    finally:
        d.close()
