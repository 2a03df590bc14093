"""What every Kafka API handler of the front end shares: the connection's
:class:`Session`, the broker's port with topic names resolved to partitions
(:class:`ApiHandlers`), and the mapping of partlog's answers to the values
Kafka clients expect (``kafka_error``, ``duration_ms``).

A handler takes the kio request entity of whatever version the client sent
(``req`` for the header fields, ``body`` for the request) and the session,
and returns a mapping of plain values that
:func:`partlog.kafka_front.codec.build` turns into that version's response
(None: no answer, as for an acks=0 produce).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from partlog.controller.cluster_meta import TopicInfo
from partlog.controller.rules import Refused
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.authz import Authz
from partlog.kafka_front.port import BrokerPort

_AZ_IN_CLIENT_ID = re.compile(r"(?:^|[,;\s])diskless_az=([A-Za-z0-9._-]{1,64})")


@dataclass(slots=True)
class Session:
    """What one connection has told us about its client."""

    peer: str
    az: str | None = None
    # Kafka's KafkaPrincipal ("User:alice"), set by the listener's
    # authentication (TLS client certificate or SASL); ANONYMOUS on a
    # PLAINTEXT listener, as Kafka's.
    principal: str = "User:ANONYMOUS"
    # The listener the client connected to (its security protocol's name):
    # Metadata and FindCoordinator advertise every broker's port of it.
    listener: str = "PLAINTEXT"

    @property
    def host(self) -> str:
        """The client's address, as ACLs match it (the peer without its port)."""
        return self.peer.rsplit(":", 1)[0]


Handler = Callable[[Any, Any, Session], Awaitable[Mapping[str, Any] | None]]


def client_az(client_id: str | None) -> str | None:
    """The AZ a client names in its client id (KIP-1163's ``diskless_az=``)."""
    if not client_id:
        return None
    m = _AZ_IN_CLIENT_ID.search(client_id)
    return m.group(1) if m else None


class ApiHandlers:
    """A group of handlers over one broker's port."""

    def __init__(self, broker: BrokerPort) -> None:
        self.broker = broker
        # The listener's checks (off until KafkaApis hands its own).
        self.authz = Authz()

    def _topics_by_name(self) -> dict[str, TopicInfo]:
        return {t.name: t for t in self.broker.metadata.topics()}

    def _tp(self, name: str | None, partition: int) -> TopicIdPartition | None:
        """The partition ``name``/``partition`` names, from the broker's
        index of topics by name (rebuilt when the metadata changes, not per
        request), or None when there is no such partition."""
        t = self.broker.topic_index.get(name) if name is not None else None
        if t is None or not 0 <= partition < t[1]:
            return None
        return TopicIdPartition(t[0], partition)


K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)


async def within_timeout(
    call: Awaitable[Mapping[K, Any]], timeout_ms: int, keys: Iterable[K], what: str
) -> dict[K, Any]:
    """An admin request's answer from the controller, waited for at most the
    request's ``timeout_ms`` (Kafka's rule): past it every key is
    REQUEST_TIMED_OUT (the change may still happen, as with Kafka); <= 0
    waits only as long as the controller client's own request timeout."""
    if timeout_ms <= 0:
        return dict(await call)
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            return dict(await call)
    except TimeoutError:
        wanted = list(keys)
        log.info("%s: %d still pending after %d ms", what, len(wanted), timeout_ms)
        late = Refused(Errors.REQUEST_TIMED_OUT, f"not done within {timeout_ms} ms: the change may still happen")
        return dict.fromkeys(wanted, late)


def duration_ms(value: Any) -> int:
    """Milliseconds of a kio duration (a timedelta) or a plain int."""
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


def kafka_error(e: Errors) -> int:
    """The code a Kafka client gets for ``e``.  partlog's own codes (outside
    Kafka's range) and NETWORK_EXCEPTION (a commit RPC to another broker
    failed; Kafka's brokers never answer it, and librdkafka takes it from a
    broker as fatal) become Kafka's retriable "maybe written" timeout: the
    producer retries and idempotence removes the duplicate."""
    if e >= 10_000 or e == Errors.NETWORK_EXCEPTION:
        return int(Errors.REQUEST_TIMED_OUT)
    return int(e)


__all__ = ["ApiHandlers", "Handler", "Session", "client_az", "duration_ms", "kafka_error"]
