"""The transaction coordinator over partlog's broker RPC, for
``partlog.client``'s transactional producer.

Kafka's InitProducerId (with a transactional id), AddPartitionsToTxn and
EndTxn, transaction version 1, answered by the coordinator of the Kafka front
end (``partlog.kafka_front.txn_coordinator``), which registers itself here
(:meth:`TxnRpc.register`, through ``Broker.set_txn_coordinator``, as
KIP-890's ``verify_txn`` is registered): the broker
sits below the front end and never imports it.  A broker without a front end
answers COORDINATOR_NOT_AVAILABLE.  The coordinator answers NOT_COORDINATOR
for ids it does not coordinate (the leader of the id's ``__transaction_state``
partition does; the client finds it in metadata and asks again).

Requests are checked by the RPC server against
``partlog.rpc.methods.BROKER_SCHEMAS``; answers carry Kafka's error codes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.frame import RpcError, RpcErrorCode
from partlog.rpc.wire import WireError, dec_tp, expect_int, expect_list, expect_str

# InitProducerId: (transactional id, timeout ms, the producer's current
# (id, epoch) when it asks for an epoch bump (KIP-360) or None) ->
# (error, producer id, epoch).
InitProducerId = Callable[[str, int, tuple[int, int] | None], Awaitable[tuple[Errors, int, int]]]
# AddPartitionsToTxn: (transactional id, producer id, epoch, partitions) ->
# one error per partition, as Kafka answers it.
AddPartitions = Callable[[str, int, int, Sequence[TopicIdPartition]], Awaitable[list[Errors]]]
# EndTxn: (transactional id, producer id, epoch, commit) -> error.
EndTxn = Callable[[str, int, int, bool], Awaitable[Errors]]


# Kafka's transaction.timeout.ms default (the producer's).
TRANSACTION_TIMEOUT_MS_DEFAULT = 60_000


class TxnRpc:
    """The handlers of ``init_producer_id`` (with a transactional id),
    ``add_partitions_to_txn`` and ``end_txn``."""

    def __init__(self) -> None:
        self._init: InitProducerId | None = None
        self._add: AddPartitions | None = None
        self._end: EndTxn | None = None

    def register(self, init_producer_id: InitProducerId, add_partitions: AddPartitions, end_txn: EndTxn) -> None:
        self._init, self._add, self._end = init_producer_id, add_partitions, end_txn

    async def init_producer_id(self, body: dict[str, Any]) -> Any:
        try:
            tid = expect_str(body.get("transactional_id"), "init_producer_id.transactional_id")
            timeout = expect_int(
                body.get("transaction_timeout_ms", TRANSACTION_TIMEOUT_MS_DEFAULT),
                "init_producer_id.transaction_timeout_ms",
            )
            pid = expect_int(body.get("producer_id", -1), "init_producer_id.producer_id")
            epoch = expect_int(body.get("producer_epoch", -1), "init_producer_id.producer_epoch")
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        if (pid == -1) != (epoch == -1) or not tid:
            # As Kafka's KafkaApis: both or neither; an empty id is no id.
            error, pid, epoch = Errors.INVALID_REQUEST, -1, -1
        elif self._init is None:
            error, pid, epoch = Errors.COORDINATOR_NOT_AVAILABLE, -1, -1
        else:
            expected = None if pid == -1 else (pid, epoch)
            error, pid, epoch = await self._init(tid, timeout, expected)
        return {"error": int(error), "producer_id": pid, "producer_epoch": epoch}

    async def add_partitions_to_txn(self, body: Any) -> Any:
        try:
            tid, pid, epoch = _txn_fields(body, "add_partitions_to_txn")
            tps = [
                dec_tp(v, "add_partitions_to_txn.partitions")
                for v in expect_list(body.get("partitions"), "add_partitions_to_txn.partitions")
            ]
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        if self._add is None:
            errors = [Errors.COORDINATOR_NOT_AVAILABLE] * len(tps)
        else:
            errors = await self._add(tid, pid, epoch, tps)
            assert len(errors) == len(tps), (errors, tps)
        return {"partitions": [[int(e)] for e in errors]}

    async def end_txn(self, body: Any) -> Any:
        try:
            tid, pid, epoch = _txn_fields(body, "end_txn")
            committed = expect_int(body.get("committed"), "end_txn.committed")
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        if self._end is None:
            error = Errors.COORDINATOR_NOT_AVAILABLE
        else:
            error = await self._end(tid, pid, epoch, bool(committed))
        return {"error": int(error)}


def _txn_fields(body: Any, what: str) -> tuple[str, int, int]:
    if type(body) is not dict:
        raise WireError(f"{what}: expected a map, got {type(body).__name__}")
    return (
        expect_str(body.get("transactional_id"), f"{what}.transactional_id"),
        expect_int(body.get("producer_id"), f"{what}.producer_id"),
        expect_int(body.get("producer_epoch"), f"{what}.producer_epoch"),
    )


__all__ = ["TRANSACTION_TIMEOUT_MS_DEFAULT", "AddPartitions", "EndTxn", "InitProducerId", "TxnRpc"]
