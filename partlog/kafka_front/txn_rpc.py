"""The transaction coordinator of this broker, answering the broker RPC's
transaction methods (``partlog.broker.txn_rpc``) for ``partlog.client``'s
transactional producer: InitProducerId with a transactional id,
AddPartitionsToTxn (partitions by topic id) and EndTxn, as the Kafka APIs
answer them (``txn_apis.py``), with the same :class:`TxnCoordinator`.

As Kafka's FindCoordinator does, InitProducerId creates
``__transaction_state`` on first use, so a client that finds no such topic
in metadata can ask any broker and look again.  AddPartitionsToTxn refuses
the whole request when one partition is unknown or internal (Kafka's
UNKNOWN_TOPIC_OR_PARTITION / TOPIC_AUTHORIZATION_FAILED, the others
OPERATION_NOT_ATTEMPTED).
"""

from __future__ import annotations

from collections.abc import Sequence

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.group_coordinator import INTERNAL_TOPICS
from partlog.kafka_front.port import BrokerPort
from partlog.kafka_front.txn_coordinator import TxnCoordinator


class TxnRpcFront:
    """Registers itself on ``broker`` (:meth:`BrokerPort.set_txn_coordinator`)."""

    def __init__(self, broker: BrokerPort, txns: TxnCoordinator) -> None:
        self.broker = broker
        self.txns = txns
        broker.set_txn_coordinator(self.init_producer_id, self.add_partitions, self.end_txn)

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[Errors, int, int]:
        if await self.txns.ensure_topic() is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, -1
        return await self.txns.init_producer_id(transactional_id, timeout_ms, expected)

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Sequence[TopicIdPartition]
    ) -> list[Errors]:
        names = {t.topic_id: (t.name, t.num_partitions) for t in self.broker.metadata.topics()}
        refused: list[Errors | None] = []
        for tp in partitions:
            known = names.get(tp.topic_id)
            if known is None or not 0 <= tp.partition < known[1]:
                refused.append(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            elif known[0] in INTERNAL_TOPICS:
                refused.append(Errors.TOPIC_AUTHORIZATION_FAILED)
            else:
                refused.append(None)
        if any(e is not None for e in refused):
            return [e if e is not None else Errors.OPERATION_NOT_ATTEMPTED for e in refused]
        error = await self.txns.add_partitions(transactional_id, producer_id, producer_epoch, partitions)
        return [error] * len(partitions)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> Errors:
        return await self.txns.end_txn(transactional_id, producer_id, producer_epoch, commit)


__all__ = ["TxnRpcFront"]
