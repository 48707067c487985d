"""An informer's source over one resource: list in pages, then watch.

:class:`Listing` is the :class:`~.informer.Source` every informer of the
daemon uses: the objects of one :class:`~.resource.ResourceClient` that
its selectors match (a node's pods by ``spec.nodeName``, a node's PodPorts
by label, one record by ``metadata.name``), each decoded by the caller's
function (a slotted record, or the JSON itself).

Lean at scale: with a ``page_size`` the list is read in pages, each page
decoded before the next is read, so 10,000 pods never exist at once as
decoded JSON (a real pod is 3-8 KiB of it, ten times that as Python
objects), and ``beat`` is called between pages (a list of 10,000 pods is
20 requests: the loop's heartbeat must not wait for all of them).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from kuryr_supervisor.kubernetes.resource import Page, ResourceClient
from kuryr_supervisor.kubernetes.wire import WatchStream

T = TypeVar("T")


class Listing(Generic[T]):
    """See the module; ``page_size`` 0 lists in one request."""

    def __init__(self, resource: ResourceClient,
                 decode: Callable[[Mapping[str, Any]], T], *,
                 namespace: str = "", field_selector: str = "",
                 label_selector: str = "", page_size: int = 0,
                 beat: Callable[[], None] = lambda: None) -> None:
        self.resource, self.decode = resource, decode
        self.namespace = namespace
        self.field_selector, self.label_selector = field_selector, label_selector
        self.page_size = page_size
        self.beat = beat

    def list(self, resource_version: str = "") -> tuple[Sequence[T], str]:
        """Every object, page by page, and the list's version: the first
        page's, which the API server keeps for the whole list
        (``resource_version`` as :func:`~.resource.versioned` asks)."""
        decode = self.decode
        page = self._page(resource_version=resource_version)
        out, version, token = [decode(o) for o in page.items], \
            page.resource_version, page.token
        del page
        while token:
            self.beat()
            page = self._page(token=token)
            out += [decode(o) for o in page.items]
            token = page.token
            del page
        return out, version

    def watch(self, resource_version: str) -> WatchStream[T]:
        return self.resource.watch(
            resource_version, self.decode, namespace=self.namespace,
            field_selector=self.field_selector,
            label_selector=self.label_selector)

    def _page(self, *, resource_version: str = "", token: str = "") -> Page:
        return self.resource.page(
            namespace=self.namespace, limit=self.page_size, token=token,
            resource_version=resource_version,
            field_selector=self.field_selector,
            label_selector=self.label_selector)
