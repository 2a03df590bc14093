"""The transaction APIs of the Kafka front end: InitProducerId with a
transactional id, AddPartitionsToTxn (v0-v3, one transaction per request as
clients send it), AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions and ListTransactions, mapped onto this broker's
:class:`partlog.kafka_front.txn_coordinator.TxnCoordinator` and, for the
offsets of a transaction, its
:class:`partlog.kafka_front.group_coordinator.GroupCoordinator`.

Transaction version 1 only (KIP-890 part 2 is not advertised).  Errors are
Kafka's, including its answer to clients too old for PRODUCER_FENCED:
INVALID_PRODUCER_EPOCH below the version that introduced it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from partlog.acl import AclOperation
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.authz import denied
from partlog.kafka_front.group_coordinator import INTERNAL_TOPICS, GroupCoordinator, partition_for
from partlog.kafka_front.handler import ApiHandlers, Session, duration_ms
from partlog.kafka_front.port import BrokerPort
from partlog.kafka_front.txn_coordinator import TxnCoordinator
from partlog.txn.coordinator import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnMetadata, TxnState

# The first version of each API whose clients understand PRODUCER_FENCED
# (KIP-588); older ones get INVALID_PRODUCER_EPOCH (Kafka's KafkaApis).
_PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}
# Transactional ids one DescribeTransactions may name.
DESCRIBE_IDS_MAX = 1_000


def _start_time(ms: int) -> datetime.datetime:
    """DescribeTransactions' start time (not nullable in its schema): -1
    ms, as Kafka sends, when no transaction is open."""
    return datetime.datetime.fromtimestamp(max(ms, -1) / 1000, tz=datetime.UTC)


def _fenced_for(api_key: int, version: int, error: Errors) -> int:
    if error == Errors.PRODUCER_FENCED and version < _PRODUCER_FENCED_SINCE[api_key]:
        return int(Errors.INVALID_PRODUCER_EPOCH)
    return int(error)


class TxnApis(ApiHandlers):
    def __init__(self, broker: BrokerPort, txns: TxnCoordinator, groups: GroupCoordinator) -> None:
        super().__init__(broker)
        self.txns = txns
        self.groups = groups

    async def init_producer_id(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        """InitProducerId of a transactional producer (the idempotent case
        is :meth:`partlog.kafka_front.apis.KafkaApis.init_producer_id`)."""
        pid = int(getattr(body, "producer_id", NO_PRODUCER_ID))
        epoch = int(getattr(body, "producer_epoch", NO_PRODUCER_EPOCH))
        if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            error, pid, epoch = Errors.INVALID_REQUEST, -1, -1
        else:
            expected = None if pid == NO_PRODUCER_ID else (pid, epoch)
            error, pid, epoch = await self.txns.init_producer_id(
                body.transactional_id, duration_ms(body.transaction_timeout), expected
            )
        return {"throttle_time": 0, "error_code": _fenced_for(22, req.api_version, error), "producer_id": pid,
                "producer_epoch": epoch}  # fmt: skip

    async def add_partitions_to_txn(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        asked: dict[tuple[str, int], Errors | TopicIdPartition] = {}
        # As Kafka: WRITE on the transactional id, else every partition is
        # refused; WRITE on each topic.
        txn_ok = self.authz.txn_id(session, AclOperation.WRITE, body.v3_and_below_transactional_id)
        for t in body.v3_and_below_topics:
            writable = txn_ok and self.authz.topic(session, AclOperation.WRITE, t.name)
            for p in t.partitions:
                tp = self._tp(t.name, int(p))
                if not txn_ok:
                    asked[(t.name, int(p))] = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                elif not writable or t.name in INTERNAL_TOPICS:
                    asked[(t.name, int(p))] = Errors.TOPIC_AUTHORIZATION_FAILED
                else:
                    asked[(t.name, int(p))] = tp if tp is not None else Errors.UNKNOWN_TOPIC_OR_PARTITION
        answers: dict[tuple[str, int], int]
        if any(isinstance(a, Errors) for a in asked.values()):
            # As Kafka: one bad partition fails the request, the others are
            # not attempted.
            answers = {k: int(a if isinstance(a, Errors) else Errors.OPERATION_NOT_ATTEMPTED) for k, a in asked.items()}
        else:
            tps = [a for a in asked.values() if isinstance(a, TopicIdPartition)]
            error = await self.txns.add_partitions(
                body.v3_and_below_transactional_id, int(body.v3_and_below_producer_id),
                int(body.v3_and_below_producer_epoch), tps,
            )  # fmt: skip
            answers = dict.fromkeys(asked, _fenced_for(24, req.api_version, error))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (name, p), code in answers.items():
            by_topic.setdefault(name, []).append({"partition_index": p, "partition_error_code": code})
        return {"throttle_time": 0, "results_by_topic_v3_and_below": [
            {"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]}  # fmt: skip

    async def add_offsets_to_txn(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if not self.authz.txn_id(session, AclOperation.WRITE, body.transactional_id):
            return denied(req, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.authz.group(session, AclOperation.READ, body.group_id):
            return denied(req, Errors.GROUP_AUTHORIZATION_FAILED)
        t = await self.groups.ensure_offsets_topic()
        if t is None:
            error = Errors.COORDINATOR_NOT_AVAILABLE
        else:
            tp = TopicIdPartition(t.topic_id, partition_for(body.group_id, t.num_partitions))
            error = await self.txns.add_partitions(
                body.transactional_id, int(body.producer_id), int(body.producer_epoch), [tp]
            )
        return {"throttle_time": 0, "error_code": _fenced_for(25, req.api_version, error)}

    async def end_txn(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if not self.authz.txn_id(session, AclOperation.WRITE, body.transactional_id):
            return denied(req, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        error = await self.txns.end_txn(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch), bool(body.committed)
        )
        return {"throttle_time": 0, "error_code": _fenced_for(26, req.api_version, error)}

    async def txn_offset_commit(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        wanted: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        # As Kafka: WRITE on the transactional id, READ on the group (else
        # every partition is refused), READ on each topic.
        refusal = None
        if not self.authz.txn_id(session, AclOperation.WRITE, body.transactional_id):
            refusal = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not self.authz.group(session, AclOperation.READ, body.group_id):
            refusal = Errors.GROUP_AUTHORIZATION_FAILED
        answers: dict[tuple[str, int], Errors] = {}
        for t in body.topics:
            topic_refusal = refusal
            if refusal is None and not self.authz.topic(session, AclOperation.READ, t.name):
                topic_refusal = Errors.TOPIC_AUTHORIZATION_FAILED
            for p in t.partitions:
                if topic_refusal is not None:
                    answers[(t.name, int(p.partition_index))] = topic_refusal
                    continue
                wanted[(t.name, int(p.partition_index))] = (
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
        if wanted or not answers:
            answers.update(
                await self.groups.commit_txn_offsets(
                    body.group_id,
                    int(body.producer_id),
                    int(body.producer_epoch),
                    getattr(body, "member_id", "") or "",
                    int(getattr(body, "generation_id", -1)),
                    getattr(body, "group_instance_id", None),
                    wanted,
                    body.transactional_id,
                )
            )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (name, p), e in answers.items():
            by_topic.setdefault(name, []).append({"partition_index": p, "error_code": int(e)})
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def describe_transactions(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        names = {t.topic_id: t.name for t in self.broker.metadata.topics()}
        states = []
        for i, tid in enumerate(body.transactional_ids):
            row: dict[str, Any] = {"transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
                                   "transaction_start_time": _start_time(-1), "producer_id": -1, "producer_epoch": -1,
                                   "topics": []}  # fmt: skip
            if i >= DESCRIBE_IDS_MAX:
                states.append({**row, "error_code": int(Errors.INVALID_REQUEST)})
                continue
            if not self.authz.txn_id(session, AclOperation.DESCRIBE, tid):
                states.append({**row, "error_code": int(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)})
                continue
            error, meta = await self.txns.describe(tid)
            if meta is None:
                states.append({**row, "error_code": int(error)})
                continue
            topics: dict[str, list[int]] = {}
            described: dict[str, bool] = {}
            for tp in sorted(meta.partitions, key=lambda tp: (str(tp.topic_id), tp.partition)):
                name = names.get(tp.topic_id)
                if name is None:
                    continue
                if name not in described:
                    described[name] = self.authz.topic(session, AclOperation.DESCRIBE, name)
                if described[name]:  # as Kafka: only the topics the caller may describe
                    topics.setdefault(name, []).append(tp.partition)
            states.append({**row, "error_code": 0, "transaction_state": meta.state.kafka_name,
                           "transaction_timeout": meta.timeout_ms, "transaction_start_time": _start_time(meta.start_ms),
                           "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                           "topics": [{"topic": n, "partitions": ps} for n, ps in topics.items()]})  # fmt: skip
        return {"throttle_time": 0, "transaction_states": states}

    async def list_transactions(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        wanted_states = {s for s in (TxnState.from_kafka_name(n) for n in body.state_filters) if s is not None}
        unknown = [n for n in body.state_filters if TxnState.from_kafka_name(n) is None]
        pids = {int(p) for p in body.producer_id_filters}
        duration = int(getattr(body, "duration_filter", -1))
        now = self.broker.clock.wall_ms()

        def shown(m: TxnMetadata) -> bool:
            # Kafka's TransactionStateManager.listTransactionStates filters.
            if pids and m.producer_id not in pids:
                return False
            if not self.authz.txn_id(session, AclOperation.DESCRIBE, m.transactional_id):
                return False
            if body.state_filters and m.state not in wanted_states:
                return False
            return duration < 0 or now - m.start_ms > duration

        error, found = self.txns.transactions_here()
        return {"throttle_time": 0, "error_code": int(error), "unknown_state_filters": unknown,
                "transaction_states": [{"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                                        "transaction_state": m.state.kafka_name}
                                       for m in found if shown(m)]}  # fmt: skip


__all__ = ["TxnApis"]
