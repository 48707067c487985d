"""The PodPort resource: its checks, and the CNI role's wait for it,
against the Kubernetes API fake over real HTTP."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kuryr_supervisor.kubernetes import podport
from kuryr_supervisor.kubernetes.portdata import PortData
from tests.fixtures.fakeapi import FakeAPI


def data(uid: str, host: int = 12, **change: str) -> PortData:
    fields = {"portId": f"port-{host}", "podUid": uid, "mac": "fa:16:3e:00:00:01",
              "address": f"10.20.0.{host}/24", "gateway": "10.20.0.1", **change}
    return PortData.from_mapping(fields)


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def test_body_round_trips_and_is_owned() -> None:
    d = data("uid-1")
    obj = podport.body("ns", "web", d)
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert podport.from_object(obj) == d and podport.same(obj, d)
    obj["metadata"]["ownerReferences"][0]["uid"] = "uid-2"
    with pytest.raises(ValueError, match="owner"):
        podport.from_object(obj)


@pytest.mark.parametrize("change", [
    {"mac": "00:00:00:00:00:00"}, {"mac": "01:00:5e:00:00:01"},
    {"address": "10.20.0.1/24"}, {"address": "10.20.0.12/31"},
    {"portId": "x" * 65}, {"gateway": "10.21.0.1"}])
def test_malformed_specs_refused(change: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        data("uid-1", **change)


def write_later(api: FakeAPI, obj: dict[str, Any], delay: float) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(delay), api.put_podport(obj)))
    t.start()
    return t


def test_waiter_sees_the_podport_when_written(api: FakeAPI) -> None:
    pod = api.add_pod("ns", "web", "node-a")
    uid = pod["metadata"]["uid"]
    wait = podport.waiter(api.client().podports)
    assert wait("ns", "web", uid, 0.3) is None            # not yet: time up
    # an earlier pod's PodPort of the same name is waited past
    api.put_podport(podport.body("ns", "web", data("old-uid")))
    t = write_later(api, podport.body("ns", "web", data(uid, 33)), 0.3)
    start = time.monotonic()
    got = wait("ns", "web", uid, 5.0)
    t.join()
    assert got is not None and str(got.address) == "10.20.0.33/24"
    assert time.monotonic() - start < 3.0
    # one list, then a watch of that one name: no polling
    lists = api.requests_for("/apis/kuryr-supervisor.openstack.org/v1/"
                             "namespaces/ns/podports")
    assert all(q["fieldSelector"] == "metadata.name=web" for q in lists)


def test_waiter_refuses_a_podport_that_claims_the_pod_but_is_wrong(
        api: FakeAPI) -> None:
    pod = api.add_pod("ns", "web", "node-a")
    uid = pod["metadata"]["uid"]
    obj = podport.body("ns", "web", data(uid))
    obj["spec"]["mac"] = "00:00:00:00:00:00"
    api.put_podport(obj)
    with pytest.raises(podport.Invalid, match="MAC"):
        podport.waiter(api.client().podports)("ns", "web", uid, 1.0)
    # podUid edited to this pod, owner left as another
    obj = podport.body("ns", "web", data(uid))
    obj["metadata"]["ownerReferences"][0]["uid"] = "victim"
    api.put_podport(obj)
    with pytest.raises(podport.Invalid, match="owner"):
        podport.waiter(api.client().podports)("ns", "web", uid, 1.0)


def test_client_create_replace_delete(api: FakeAPI) -> None:
    client = api.client()
    obj = podport.body("ns", "web", data("u1"))
    client.podports.create(obj, namespace="ns")
    from kuryr_supervisor.kubernetes import client as k8s
    with pytest.raises(k8s.K8sPermanent) as info:
        client.podports.create(obj, namespace="ns")
    assert info.value.status == 409
    current = client.podports.get("web", namespace="ns")
    assert current is not None
    stale = dict(obj, metadata=dict(obj["metadata"], resourceVersion="1"))
    with pytest.raises(k8s.K8sPermanent):
        client.podports.replace("web", stale, namespace="ns")
    with pytest.raises(k8s.K8sPermanent) as info:
        client.podports.delete("web", namespace="ns", uid="not-its-uid")
    assert info.value.status == 409
    assert client.podports.delete("web", namespace="ns",
                                  uid=current["metadata"]["uid"])
    assert client.podports.get("web", namespace="ns") is None
    assert client.podports.delete("web", namespace="ns") is False


def say(client: Any, port_status: str) -> None:
    """The controller's word on the port (the PodPort's status)."""
    client.podports.patch("web", podport.status_patch(
        {"portStatus": port_status}), namespace="ns", subresource="status")


def test_lookup_waits_for_an_active_port_and_refuses_a_failed_one(api: FakeAPI) -> None:
    """[cni_daemon] wait_for_active_port: the address only once the
    PodPort says ACTIVE; BINDING_FAILED is a clear, uncounted error."""
    import ipaddress

    from kuryr_supervisor import errors
    from kuryr_supervisor.cni.ipam.records import PodRef
    from kuryr_supervisor.kubernetes.portdata import PortData
    from kuryr_supervisor.workers.assembly import podport_lookup
    pod = api.add_pod("ns", "web", "node-a")
    uid = pod["metadata"]["uid"]
    data = PortData(port_id="p1", pod_uid=uid, mac="fa:16:3e:00:00:01",
                          address=ipaddress.IPv4Interface("10.0.0.5/24"),
                          gateway=ipaddress.IPv4Address("10.0.0.1"))
    client = api.client()
    client.podports.create(podport.body("ns", "web", data), namespace="ns")
    active = [True]
    lookup = podport_lookup(client, active=lambda: active[0])
    ref = PodRef(namespace="ns", name="web", uid=uid)
    assert lookup(ref, 0.3) is None                     # no status yet
    say(client, "DOWN")
    assert lookup(ref, 0.3) is None
    say(client, "ACTIVE")
    found = lookup(ref, 0.3)
    assert found is not None and found.address == data.address
    say(client, "BINDING_FAILED")
    with pytest.raises(errors.PortBindingFailed, match="failed to bind port p1"):
        lookup(ref, 0.3)
    assert not errors.PortBindingFailed("x").wire.counts_as_failure
    active[0] = False                                    # the option off
    say(client, "DOWN")
    assert lookup(ref, 0.3) is not None
