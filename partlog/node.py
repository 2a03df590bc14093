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
listen holds no port.  Kafka requests are read only once ``start`` is done
(the broker registered, its ACLs and configs followed).  ``stop`` closes the Kafka listener first (its
requests go through the broker), then the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from partlog.broker.server import Broker, BrokerConfig
from partlog.controller.acl_sources import FollowedAcls, acl_source_for
from partlog.controller.cluster_meta import MetadataSource
from partlog.controller.dynamic_configs import dynamic_config_source_for
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
    # With the authorizer on, principals the broker RPC allows every method
    # besides super.users, not on the Kafka listener: what ``partlog
    # cluster`` gives its own brokers (partlog.broker.rpc_authz).
    rpc_super_users: frozenset[str] = frozenset()


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
        self.acls = acl_source_for(metadata) if config.kafka.authorizer is not None else None
        # BROKER and GROUP resources' configs: the broker applies the log.*
        # topic defaults, the Kafka front serves and applies the rest.
        self.dynamic_configs = dynamic_config_source_for(metadata)
        self.broker.follow_dynamic_configs(self.dynamic_configs)

        # The broker RPC's peers need CLUSTER_ACTION when the authorizer is on,
        # their certificates mapped by the Kafka listeners' rules.
        if (auth := config.kafka.authorizer) is not None and self.acls is not None:
            rpc = replace(auth, super_users=auth.super_users | config.rpc_super_users)
            self.broker.authorize_rpc(rpc, self.acls, config.kafka_security.mapper())

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
            await kafka.start(serve=False)  # from ``start`` on
        except OSError as e:
            await self.broker.unlisten()
            where = ",".join(map(str, kafka.specs))
            raise OSError(e.errno, f"Kafka listeners {where}: {e.strerror}") from e
        self.kafka = kafka

    async def start(self) -> None:
        await self.listen()
        await self.broker.start()
        if isinstance(self.acls, FollowedAcls):
            await self.acls.start()
        if isinstance(self.dynamic_configs, FollowedAcls):  # the same start/stop protocol
            await self.dynamic_configs.start()
        if self.kafka is not None:
            # Kafka reads no request before its startup ends (registered,
            # metadata, authorizer): clients wait, unanswered, until then.
            self.kafka.serve()

    async def stop(self) -> None:
        """Stop the Kafka listener, then the broker (see ``Broker.stop``)."""
        if isinstance(self.acls, FollowedAcls):
            await self.acls.stop()
        if isinstance(self.dynamic_configs, FollowedAcls):
            await self.dynamic_configs.stop()
        if self.kafka is not None:
            await self.kafka.close()
        await self.broker.stop()


__all__ = ["BrokerNode", "NodeConfig"]
