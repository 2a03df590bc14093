"""A broker node: the composition root that puts a broker and its Kafka
listener together.

:mod:`partlog.broker` knows nothing of Kafka's protocol, and
:mod:`partlog.kafka_front` knows the broker only through its port
(:class:`partlog.kafka_front.port.BrokerPort`, which :class:`Broker`
implements).  A :class:`BrokerNode` builds the :class:`Broker` (with its
Prometheus registry, :class:`partlog.broker.metrics.BrokerMetrics`), then,
when its config asks for one, a :class:`KafkaListener` serving that broker,
whose metrics go into the same registry (one ``/metrics`` for both).

Order: ``listen`` binds the broker's RPC port, then the Kafka port; a Kafka
port that cannot be bound gives the RPC port back, so a node that fails to
listen holds no port.  ``stop`` closes the Kafka listener first (its
requests go through the broker), then the broker.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from partlog.acl.source import AclSource, LocalAcls
from partlog.broker.server import Broker, BrokerConfig
from partlog.controller.acls import ControllerAcls
from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import MetadataSource
from partlog.kafka_front.apis import FrontConfig
from partlog.kafka_front.listeners import ListenerSecurity, ListenerSpec
from partlog.kafka_front.server import KafkaListener, ListenerLimits
from partlog.runtime import SYSTEM_CLOCK, SYSTEM_ENTROPY, Clock, Entropy
from partlog.wal.objectstore import ObjectStore


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """A broker's config and its Kafka listener's."""

    broker: BrokerConfig
    # The Kafka listener, on ``broker.host``: None for none, 0 for any free
    # port (``BrokerNode.kafka_port`` tells which).
    kafka_port: int | None = None
    kafka: FrontConfig = field(default_factory=FrontConfig)
    kafka_limits: ListenerLimits = field(default_factory=ListenerLimits)
    # Kafka's ``listeners`` (partlog.kafka_front.listeners): when given,
    # these instead of one PLAINTEXT listener on ``kafka_port``.
    kafka_listeners: tuple[ListenerSpec, ...] = ()
    kafka_security: ListenerSecurity = field(default_factory=ListenerSecurity)


@runtime_checkable
class _FollowedAcls(Protocol):
    """A source that follows the cluster's ACLs while the node runs."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _acl_source(metadata: MetadataSource) -> AclSource:
    """An authorizer's ACLs: the controller's (followed by a long-poll),
    etcd's (followed by a watch), or this process's own on a static cluster."""
    if isinstance(metadata, ControllerMetadata):
        return ControllerAcls(metadata.call)
    # etcd's client (grpc) is imported only where metadata is on etcd; then
    # its module is loaded.
    etcd_meta = sys.modules.get("partlog.controller.etcd_meta")
    if etcd_meta is not None and isinstance(metadata, etcd_meta.EtcdMetadata):
        from partlog.controller.etcd_acls import EtcdAcls

        return EtcdAcls(
            metadata.target,
            request_timeout_ms=metadata.request_timeout_ms,
            retry_backoff_ms=metadata.retry_backoff_ms,
            retry_backoff_max_ms=metadata.retry_backoff_max_ms,
        )
    return LocalAcls()


class BrokerNode:
    """One broker and its Kafka listener.  ``await start()`` (or ``listen()``
    first, to hold the ports before registering), ``await stop()``.

    ``make_broker`` builds the broker from ``(config.broker, metadata,
    objects, clock=clock, entropy=entropy)``: :class:`Broker`, or a subclass
    of it; the Kafka listener runs on the broker's clock and entropy."""

    def __init__(
        self,
        config: NodeConfig,
        metadata: MetadataSource,
        objects: ObjectStore,
        *,
        clock: Clock = SYSTEM_CLOCK,
        entropy: Entropy = SYSTEM_ENTROPY,
        make_broker: Callable[..., Broker] = Broker,
    ) -> None:
        self.config = config
        self.broker = make_broker(config.broker, metadata, objects, clock=clock, entropy=entropy)
        self.kafka: KafkaListener | None = None
        self.acls = _acl_source(metadata) if config.kafka.authorizer is not None else None

    @property
    def port(self) -> int:
        """The broker RPC port (0 until ``listen``)."""
        return self.broker.port

    @property
    def kafka_port(self) -> int:
        """The first Kafka listener's port (0: none)."""
        return self.kafka.port if self.kafka is not None else 0

    @property
    def cluster_id(self) -> uuid.UUID | None:
        return self.broker.cluster_id

    async def listen(self) -> None:
        """Bind the RPC port, then the Kafka port (``start`` does it when
        not done yet); an OSError names the port that failed."""
        await self.broker.listen()
        listeners = self.config.kafka_listeners
        if (self.config.kafka_port is None and not listeners) or self.kafka is not None:
            return
        host = self.config.broker.host
        kafka = KafkaListener(
            self.broker,
            host=host,
            port=self.config.kafka_port or 0,
            config=self.config.kafka,
            limits=self.config.kafka_limits,
            registry=self.broker.metrics.registry,
            acl_source=self.acls,
            listeners=listeners or None,
            security=self.config.kafka_security,
        )
        try:
            await kafka.start()
        except OSError as e:
            await self.broker.unlisten()
            where = ",".join(map(str, kafka.specs))
            raise OSError(e.errno, f"Kafka listeners {where}: {e.strerror}") from e
        self.kafka = kafka

    async def start(self) -> None:
        await self.listen()
        await self.broker.start()
        if isinstance(self.acls, _FollowedAcls):
            await self.acls.start()

    async def stop(self) -> None:
        """Stop the Kafka listener, then the broker (see ``Broker.stop``)."""
        if isinstance(self.acls, _FollowedAcls):
            await self.acls.stop()
        if self.kafka is not None:
            await self.kafka.close()
        await self.broker.stop()


__all__ = ["BrokerNode", "NodeConfig"]
