"""The transaction coordinator's shell on a fake broker: placement and
load, writes of the core's transitions, markers (with the coordinator epoch)
before Complete*, fencing, timeouts, recovery of a prepared transaction by a
new coordinator, and a failed write leaving the state as it was."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import pytest

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition, TxnMarkerRequest
from partlog.kafka_front import txn_coordinator
from partlog.kafka_front.group_coordinator import partition_for
from partlog.kafka_front.txn_coordinator import TXN_STATE_PARTITIONS_DEFAULT, TXN_STATE_TOPIC, TxnCoordinator
from partlog.txn.coordinator import TxnState
from tests.fake_broker import FakeBroker

T = TypeVar("T")


def _run(body: Callable[[FakeBroker], Awaitable[T]]) -> T:
    async def main() -> T:
        return await body(FakeBroker())

    return asyncio.run(main())


async def _settle(c: TxnCoordinator) -> None:
    """Let the coordinator's background tasks (markers, Complete*) run."""
    for _ in range(50):
        await asyncio.sleep(0)
    for part in list(c._parts.values()):
        if part.tasks:
            await asyncio.wait(list(part.tasks), timeout=5)


def _data_partitions(broker: FakeBroker) -> list[TopicIdPartition]:
    t = broker.metadata.add("data", 3)
    return [TopicIdPartition(t.topic_id, p) for p in range(3)]


async def _producer(broker: FakeBroker, timeout_ms: int) -> tuple[TxnCoordinator, list[TopicIdPartition], int, int]:
    """A coordinator, a topic of three partitions, and the producer id and
    epoch of transactional id "t"."""
    c = TxnCoordinator(broker.port())
    tps = _data_partitions(broker)
    assert await c.find_coordinator("t") == (Errors.NONE, broker.broker_id)
    error, pid, epoch = await c.init_producer_id("t", timeout_ms, None)
    assert error == Errors.NONE
    return c, tps, pid, epoch


def _txn_tp(broker: FakeBroker, tid: str) -> TopicIdPartition:
    t = broker.metadata.topics_by_name[TXN_STATE_TOPIC]
    return TopicIdPartition(t.topic_id, partition_for(tid, t.num_partitions))


def test_commit_writes_markers_then_complete() -> None:
    async def body(broker: FakeBroker) -> None:
        c = TxnCoordinator(broker.port())
        tps = _data_partitions(broker)
        assert await c.find_coordinator("t") == (Errors.NONE, broker.broker_id)
        broker.epochs[_txn_tp(broker, "t")] = 4
        error, pid, epoch = await c.init_producer_id("t", 10_000, None)
        assert (error, epoch) == (Errors.NONE, 0) and pid > 0
        assert await c.add_partitions("t", pid, epoch, tps[:2]) == Errors.NONE
        assert await c.end_txn("t", pid, epoch, True) == Errors.NONE
        await _settle(c)
        assert {(m.topic_id_partition, m.committed, m.coordinator_epoch, m.producer_epoch) for m in broker.markers} == {
            (tps[0], True, 4, 0), (tps[1], True, 4, 0)}  # fmt: skip
        error, meta = await c.describe("t")
        assert error == Errors.NONE and meta is not None and meta.state == TxnState.COMPLETE_COMMIT
        # A retried EndTxn of the same commit is answered NONE.
        assert await c.end_txn("t", pid, epoch, True) == Errors.NONE
        await c.close()

    _run(body)


def test_a_second_producer_fences_the_first_and_aborts_its_transaction() -> None:
    async def body(broker: FakeBroker) -> None:
        c, tps, pid, epoch = await _producer(broker, 10_000)
        assert await c.add_partitions("t", pid, epoch, tps[:1]) == Errors.NONE
        assert await c.init_producer_id("t", 10_000, None) == (Errors.CONCURRENT_TRANSACTIONS, -1, -1)
        await _settle(c)
        [marker] = broker.markers
        assert (marker.committed, marker.producer_epoch) == (False, epoch + 1)
        assert await c.init_producer_id("t", 10_000, None) == (Errors.NONE, pid, epoch + 2)
        assert await c.end_txn("t", pid, epoch, True) == Errors.PRODUCER_FENCED
        assert await c.add_partitions("t", pid, epoch, tps[:1]) == Errors.PRODUCER_FENCED
        await c.close()

    _run(body)


def test_a_timed_out_transaction_is_aborted_with_an_epoch_bump() -> None:
    async def body(broker: FakeBroker) -> None:
        c, tps, pid, epoch = await _producer(broker, 1_000)
        assert await c.add_partitions("t", pid, epoch, tps) == Errors.NONE
        c.tick(broker.clock.wall_ms() + 500)
        await _settle(c)
        assert broker.markers == []
        c.tick(broker.clock.wall_ms() + 1_001)
        await _settle(c)
        assert {(m.committed, m.producer_epoch) for m in broker.markers} == {(False, epoch + 1)}
        assert len(broker.markers) == 3
        assert await c.end_txn("t", pid, epoch, True) == Errors.PRODUCER_FENCED
        _, meta = await c.describe("t")
        assert meta is not None and meta.state == TxnState.COMPLETE_ABORT
        await c.close()

    _run(body)


def test_a_new_coordinator_finishes_a_prepared_transaction() -> None:
    async def body(broker: FakeBroker) -> None:
        c, tps, pid, epoch = await _producer(broker, 10_000)
        assert await c.add_partitions("t", pid, epoch, tps) == Errors.NONE
        broker.marker_errors = [Errors.NOT_LEADER_OR_FOLLOWER] * 1000
        assert await c.end_txn("t", pid, epoch, True) == Errors.NONE
        for _ in range(5):
            await asyncio.sleep(0)
        # Leadership moves before the markers got through: the old
        # coordinator stops, the new one loads the log and sends them.
        broker.epochs[_txn_tp(broker, "t")] = 1
        await _settle(c)
        assert broker.markers == []
        broker.marker_errors = []
        c2 = TxnCoordinator(broker.port())
        error, meta = await c2.describe("t")
        assert error == Errors.NONE and meta is not None and meta.state == TxnState.PREPARE_COMMIT
        assert await c2.end_txn("t", pid, epoch, True) == Errors.CONCURRENT_TRANSACTIONS
        await _settle(c2)
        assert {m.topic_id_partition for m in broker.markers} == set(tps)
        assert {(m.committed, m.coordinator_epoch) for m in broker.markers} == {(True, 1)}
        _, meta = await c2.describe("t")
        assert meta is not None and meta.state == TxnState.COMPLETE_COMMIT
        await c.close()
        await c2.close()

    _run(body)


def test_a_failed_write_leaves_the_state_as_it_was() -> None:
    async def body(broker: FakeBroker) -> None:
        c, tps, pid, epoch = await _producer(broker, 10_000)
        broker.produce_error = Errors.NOT_ENOUGH_REPLICAS
        assert await c.add_partitions("t", pid, epoch, tps) == Errors.COORDINATOR_NOT_AVAILABLE
        broker.produce_error = Errors.NONE
        _, meta = await c.describe("t")
        assert meta is not None and meta.state == TxnState.EMPTY and not meta.partitions
        assert await c.end_txn("t", pid, epoch, True) == Errors.INVALID_TXN_STATE
        await c.close()

    _run(body)


def test_not_the_leader_is_not_coordinator() -> None:
    async def body(broker: FakeBroker) -> None:
        c = TxnCoordinator(broker.port())
        await c.find_coordinator("t")
        tp = _txn_tp(broker, "t")
        broker.epochs[tp] = None
        # The metadata names this broker, its replica does not lead yet (at
        # start): loading, retried in place, as Kafka's loading coordinator.
        assert await c.init_producer_id("t", 10_000, None) == (Errors.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
        t = broker.metadata.topics_by_name[TXN_STATE_TOPIC]
        moved = dataclasses.replace(t.partitions[tp.partition], leader=broker.broker_id + 1)
        parts = tuple(moved if i == tp.partition else p for i, p in enumerate(t.partitions))
        broker.metadata.topics_by_name[TXN_STATE_TOPIC] = dataclasses.replace(t, partitions=parts)
        assert await c.init_producer_id("t", 10_000, None) == (Errors.NOT_COORDINATOR, -1, -1)
        await c.close()

    _run(body)


def test_an_idle_id_expires_with_a_tombstone() -> None:
    async def body(broker: FakeBroker) -> None:
        c = TxnCoordinator(broker.port(), expiration_ms=60_000)
        await c.find_coordinator("t")
        _, pid, _ = await c.init_producer_id("t", 10_000, None)
        c.tick(broker.clock.wall_ms() + 59_999)
        await _settle(c)
        assert (await c.describe("t"))[0] == Errors.NONE
        c.tick(broker.clock.wall_ms() + 60_000)
        await _settle(c)
        assert await c.describe("t") == (Errors.TRANSACTIONAL_ID_NOT_FOUND, None)
        # A new coordinator finds the tombstone; the id starts afresh.
        broker.epochs[_txn_tp(broker, "t")] = 1
        c2 = TxnCoordinator(broker.port())
        assert await c2.describe("t") == (Errors.TRANSACTIONAL_ID_NOT_FOUND, None)
        error, pid2, epoch2 = await c2.init_producer_id("t", 10_000, None)
        assert error == Errors.NONE and pid2 != pid and epoch2 == 0
        await c.close()
        await c2.close()

    _run(body)


def test_a_new_leader_finishes_a_prepared_transaction_unasked() -> None:
    """The producer is gone too: the broker that comes to lead the
    partition loads it on its own and sends the markers."""

    async def body(broker: FakeBroker) -> None:
        c, tps, pid, epoch = await _producer(broker, 10_000)
        assert await c.add_partitions("t", pid, epoch, tps) == Errors.NONE
        broker.marker_errors = [Errors.NOT_ENOUGH_REPLICAS] * 1000
        assert await c.end_txn("t", pid, epoch, False) == Errors.NONE
        await c.close()
        broker.marker_errors = []
        broker.epochs[_txn_tp(broker, "t")] = 1
        c2 = TxnCoordinator(broker.port())
        c2.claim_partitions()
        await _settle(c2)
        assert {(m.topic_id_partition, m.committed, m.coordinator_epoch) for m in broker.markers} == {
            (tp, False, 1) for tp in tps}  # fmt: skip
        assert len(c2._parts) == TXN_STATE_PARTITIONS_DEFAULT
        # Leadership lost: the partition's state is forgotten.
        broker.epochs[_txn_tp(broker, "t")] = None
        c2.claim_partitions()
        assert len(c2._parts) == TXN_STATE_PARTITIONS_DEFAULT - 1
        await c2.close()

    _run(body)


def test_steps_of_a_transaction_are_timed() -> None:
    """Each step of a transaction is observed once (the operators'
    partlog_kafka_txn_step_seconds)."""

    async def body(broker: FakeBroker) -> None:
        c, tps, pid, epoch = await _producer(broker, 10_000)
        steps: list[str] = []
        c.observe_step = lambda step, seconds: steps.append(step) if seconds >= 0 else None
        assert await c.add_partitions("t", pid, epoch, tps[:1]) == Errors.NONE
        assert await c.end_txn("t", pid, epoch, True) == Errors.NONE
        await _settle(c)
        assert sorted(steps) == ["markers", "prepared_to_complete", "write_add", "write_complete", "write_end"]
        await c.close()

    _run(body)


def test_next_add_waits_for_the_previous_transaction_to_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    """An AddPartitionsToTxn that comes while the id's previous transaction
    has its markers and Complete* written is held until they are, then
    answered as a retry would be; past ``ADD_HOLD_MS`` it is answered
    CONCURRENT_TRANSACTIONS."""
    monkeypatch.setattr(txn_coordinator, "ADD_HOLD_MS", 20)

    async def body(broker: FakeBroker) -> None:
        c, tps, pid, epoch = await _producer(broker, 10_000)
        assert await c.add_partitions("t", pid, epoch, tps[:1]) == Errors.NONE
        assert await c.end_txn("t", pid, epoch, True) == Errors.NONE
        assert await c.add_partitions("t", pid, epoch, tps[1:2]) == Errors.NONE
        assert broker.markers and c.stats["adds_held"] == 1 and c.stats["concurrent_transactions"] == 0
        error, meta = await c.describe("t")
        assert error == Errors.NONE and meta is not None
        assert meta.state == TxnState.ONGOING and meta.partitions == frozenset(tps[1:2])
        # Markers that are never answered: the hold ends, the client retries.
        never = asyncio.Event()

        async def stuck(markers: Sequence[TxnMarkerRequest], *, timeout_ms: int) -> list[Errors]:
            await never.wait()
            return []

        broker.write_txn_markers = stuck  # type: ignore[method-assign]
        assert await c.end_txn("t", pid, epoch, True) == Errors.NONE
        assert await c.add_partitions("t", pid, epoch, tps[:1]) == Errors.CONCURRENT_TRANSACTIONS
        assert c.stats["adds_held"] == 2 and c.stats["concurrent_transactions"] == 1
        await c.close()

    _run(body)
