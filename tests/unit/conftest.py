"""The unit tier uses no network: TCP and UDP sockets refuse to connect or bind.

The guard wraps every unit test's setup (its fixtures, module-scoped ones
included) and its call, not its teardown: a worker of pytest-xdist tears
down other tiers' session fixtures (SeaweedFS) after whichever test it ran
last.  Unix sockets stay allowed: asyncio's event loop wakes itself through
a socketpair.  Native clients (librdkafka, obstore, gRPC) bypass Python's
socket module; the tier's rules in tests/conftest.py keep them out too.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

_INET = (socket.AF_INET, socket.AF_INET6)
_GUARDED = ("connect", "connect_ex", "bind")


class NetworkInUnitTestError(RuntimeError):
    """A unit test reached for the network: it belongs in tests/integration/ or tests/system/."""


def _guarded(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        if self.family in _INET:
            raise NetworkInUnitTestError(
                f"socket.{name}{args!r} in a unit test: move the test to tests/integration/ or tests/system/"
            )
        return original(self, *args, **kwargs)

    return guarded


@contextlib.contextmanager
def no_network() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for name in _GUARDED:
            mp.setattr(socket.socket, name, _guarded(name, getattr(socket.socket, name)))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with no_network():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with no_network():
        return (yield)
