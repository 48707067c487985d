"""The port handler's pod book: one record per pod, and what is kept of a
pod a (lagging) list lacks until it arrives or is confirmed gone."""
from __future__ import annotations

from kuryr_supervisor.controller.ports.book import PodBook, PodRecord
from kuryr_supervisor.controller.ports.podports import Named

NAMED = Named("port-1", "10.0.0.5", "fa:16:3e:00:00:05")


def listed(*uids: str) -> list[PodRecord]:
    return [PodRecord(u, "ns", f"pod-{u}") for u in uids]


def test_a_lacking_pod_keeps_what_its_podport_names_and_its_create() -> None:
    book = PodBook()
    book.replace(listed("a", "b"))
    book.pods["a"].adopts("port-1")
    book.pods["a"].names(NAMED)
    book.hold("b", 50.0)
    book.replace(listed())               # a list that lacks both
    assert not book.pods and set(book.lacking) == {"a", "b"}
    assert book.named("a") == NAMED and dict(book.all_named()) == {"a": NAMED}
    assert book.creates() == [("b", 50.0)]
    assert book.lacking["a"].port_id == ""   # the port is the list's to say
    again = book.add(PodRecord("a", "ns", "pod-a"))     # the watch brings it
    assert again.named == NAMED and "a" not in book.lacking
    book.replace(listed("a", "b"))                      # and the next list
    assert book.pods["b"].inflight == 50.0 and not book.lacking
    assert [r.uid for r in book.held()] == ["b"]


def test_one_record_goes_at_once() -> None:
    book = PodBook()
    book.replace(listed("a"))
    pod = book.pods["a"]
    pod.needs("node-1")
    pod.keeps("port-1")
    pod.names(NAMED)
    book.hold("a", 9.0)
    assert book.drop("a") is pod and "a" not in book and not book.held()
    assert book.named("a") is None and book.drop("a") is None
    book.name("gone", NAMED)            # a PodPort whose pod is not listed
    assert book.drop("gone") is not None and not book.lacking


def test_expired_idempotent_or_finished_creates_hold_nothing() -> None:
    book = PodBook()
    book.replace(listed("a", "b", "c"))
    book.hold("a", 10.0)
    book.hold("b", 30.0)
    book.hold("c", 30.0)
    book.pods["c"].done()
    book.expire(20.0, idempotent=False)
    assert [r.uid for r in book.held()] == ["b"]
    book.expire(20.0, idempotent=True)
    assert not book.held() and not book.creates()
