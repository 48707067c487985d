"""Fixtures shared by the functional tests."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.functional.cni_harness import Namespaces


@pytest.fixture
def namespaces() -> Iterator[Namespaces]:
    """Network namespaces a test creates, all deleted after it."""
    ns = Namespaces()
    yield ns
    ns.cleanup()
