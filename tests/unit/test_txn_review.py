"""Regressions found by a hostile review of transactions (increment 1), on
the fake broker: each test is a race or order a Kafka committer would try."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition, TxnMarkerRequest
from partlog.kafka_front.apis import KafkaApis
from partlog.kafka_front.codec import Request, build, encode_response, response_class
from partlog.kafka_front.group_coordinator import Committed
from partlog.kafka_front.handler import Session
from partlog.kafka_front.txn_coordinator import TxnCoordinator
from partlog.produce.pipeline import BatchResult
from tests.fake_broker import FakeBroker
from tests.group_helpers import assert_a_load_rebuilds, leadership_moves_during_produce, live_coordinator


def test_an_abort_marker_heard_while_the_txn_offset_commit_is_in_flight_drops_its_offsets() -> None:
    """Regression: TxnOffsetCommit added its offsets to the producer's
    pending ones only once its append returned.  When the ABORT marker (a
    transaction timeout, a fencing InitProducerId) was appended after the
    batch and heard before the append's answer, the offsets stayed pending:
    OffsetFetch require_stable answered UNSTABLE_OFFSET_COMMIT for good, and
    the producer's next COMMIT applied the aborted transaction's offsets,
    which a load of the log (batch, then ABORT) drops."""

    async def main() -> None:
        async with live_coordinator(2) as (broker, live, tp):
            produce = broker.produce

            async def produce_then_abort(
                batches: Sequence[tuple[TopicIdPartition, bytes]],
                *,
                acks: int,
                timeout_ms: int,
                urgent: bool = False,
                transactional_id: str | None = None,
            ) -> list[BatchResult]:
                got = await produce(
                    batches, acks=acks, timeout_ms=timeout_ms, urgent=urgent, transactional_id=transactional_id
                )
                # The coordinator aborts the transaction (epoch bumped) while
                # the append's answer is on its way back.
                await broker.write_txn_markers([TxnMarkerRequest(tp, 7, 1, 0, False)], timeout_ms=1)
                return got

            broker.produce = produce_then_abort  # type: ignore[method-assign]
            wanted = {("data", 0): (5, -1, None)}
            assert await live.commit_txn_offsets("g", 7, 0, "", -1, None, wanted) == {("data", 0): Errors.NONE}
            broker.produce = produce  # type: ignore[method-assign]
            broker.clock.advance(5.0)  # past the timer's backoff after a failed write

            error, found = await live.fetch_offsets("g", [("data", 0)], require_stable=True)
            assert error == Errors.NONE
            assert found[("data", 0)] is None  # aborted: nothing committed, nothing pending

            # The producer's next transaction commits offsets of another partition.
            other = {("data", 1): (3, -1, None)}
            assert await live.commit_txn_offsets("g", 7, 1, "", -1, None, other) == {("data", 1): Errors.NONE}
            await broker.write_txn_markers([TxnMarkerRequest(tp, 7, 1, 0, True)], timeout_ms=1)
            error, found = await live.fetch_offsets("g", [("data", 0), ("data", 1)], require_stable=True)
            assert found[("data", 0)] is None  # the aborted transaction's offset never applies
            c = found[("data", 1)]
            assert isinstance(c, Committed) and c.offset == 3

            await assert_a_load_rebuilds(broker, live)

    asyncio.run(main())


def test_a_timeout_abort_whose_write_failed_is_tried_again() -> None:
    """Regression: when the PrepareAbort of a timed-out transaction failed
    to be written (the transaction log briefly short of replicas), the
    timer never looked at the transaction again: its deadlines were
    recomputed only after a successful write, so in a quiet cluster the
    transaction of a dead producer stayed open for good and the LSO of its
    partitions never moved (read_committed consumers stuck)."""

    async def main() -> None:
        broker = FakeBroker()
        t = broker.metadata.add("data", 1)
        c = TxnCoordinator(broker.port())
        try:
            assert await c.find_coordinator("t") == (Errors.NONE, broker.broker_id)
            error, pid, epoch = await c.init_producer_id("t", 1_000, None)
            assert error == Errors.NONE
            assert await c.add_partitions("t", pid, epoch, [TopicIdPartition(t.topic_id, 0)]) == Errors.NONE
            produce, failed = broker.produce, []

            async def failing(
                batches: Sequence[tuple[TopicIdPartition, bytes]],
                *,
                acks: int,
                timeout_ms: int,
                urgent: bool = False,
                transactional_id: str | None = None,
            ) -> list[BatchResult]:
                failed.append(batches)
                await asyncio.sleep(0)
                return [BatchResult(tp, Errors.NOT_ENOUGH_REPLICAS) for tp, _ in batches]

            broker.produce = failing  # type: ignore[method-assign]
            broker.clock.advance(2.0)  # past the transaction's timeout
            c.start()
            [part] = c._parts.values()
            # The timer tries to abort it; the write fails and is reverted.
            while not failed or part.txns.pending("t") is not None:
                await asyncio.sleep(0.01)
            broker.produce = produce  # type: ignore[method-assign]
            broker.clock.advance(5.0)  # past the timer's backoff after a failed write
            # The log is healthy again: the abort happens (bounded wait, no timing asserted).
            for _ in range(1000):
                if broker.markers:
                    break
                await asyncio.sleep(0.01)
            assert [(m.committed, m.producer_epoch) for m in broker.markers] == [(False, epoch + 1)]
        finally:
            await c.close()

    asyncio.run(main())


async def _call(apis: KafkaApis, api_key: int, version: int, **body: Any) -> Any:
    req = Request(api_key, version, 1, "test", None)
    answer = await apis.handlers[api_key](req, SimpleNamespace(**body), Session("127.0.0.1:1"))
    assert isinstance(answer, Mapping)
    entity = build(response_class(api_key, version), answer)
    encode_response(req, entity)
    return entity


def test_txn_offsets_of_a_group_never_added_do_not_hang_read_committed_consumers() -> None:
    """A client that skips AddOffsetsToTxn (or whose AddOffsetsToTxn was
    lost to a bug) writes its offsets into a transaction the coordinator
    does not know of: EndTxn sends no marker to the offsets partition, the
    offsets stay pending for good, and every read_committed consumer of the
    group (OffsetFetch require_stable) is answered UNSTABLE_OFFSET_COMMIT
    forever; the offsets partition's LSO is stuck too.  Kafka with KIP-890
    part 1 refuses the TxnOffsetCommit (INVALID_TXN_STATE), and so does the
    offsets partition's leader here (it verifies with the coordinator)."""

    async def main() -> None:
        broker = FakeBroker()
        broker.metadata.add("data", 1)
        apis = KafkaApis(broker.port())
        apis.groups.start()
        try:
            found = await _call(apis, 10, 4, key_type=1, coordinator_keys=("t",))
            assert [c.error_code for c in found.coordinators] == [0]
            found = await _call(apis, 10, 4, key_type=0, coordinator_keys=("g",))
            assert [c.error_code for c in found.coordinators] == [0]
            r = await _call(apis, 22, 4, transactional_id="t", transaction_timeout=10_000, producer_id=-1,
                            producer_epoch=-1)  # fmt: skip
            pid, epoch = int(r.producer_id), int(r.producer_epoch)
            topics = (SimpleNamespace(name="data", partitions=(0,)),)
            r = await _call(apis, 24, 3, v3_and_below_transactional_id="t", v3_and_below_producer_id=pid,
                            v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics)  # fmt: skip
            part = SimpleNamespace(partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                                   committed_metadata=None)  # fmt: skip
            r = await _call(apis, 28, 3, transactional_id="t", group_id="g", producer_id=pid, producer_epoch=epoch,
                            generation_id=-1, member_id="", group_instance_id=None,
                            topics=(SimpleNamespace(name="data", partitions=(part,)),))  # fmt: skip
            refused = r.topics[0].partitions[0].error_code == Errors.INVALID_TXN_STATE
            assert refused, Errors(r.topics[0].partitions[0].error_code)
            r = await _call(apis, 26, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=True)
            assert r.error_code == 0
            for _ in range(50):
                await asyncio.sleep(0)
            for p in list(apis.txns._parts.values()):
                if p.tasks:
                    await asyncio.wait(list(p.tasks), timeout=5)
            r = await _call(apis, 9, 7, group_id="g", topics=(SimpleNamespace(name="data", partition_indexes=(0,)),),
                            require_stable=True)  # fmt: skip
            [fetched] = r.topics[0].partitions
            assert refused or fetched.error_code == 0, Errors(fetched.error_code)
        finally:
            await apis.groups.close()
            await apis.txns.close()

    asyncio.run(main())


def test_a_txn_offset_commit_that_lands_after_a_new_coordinator_loaded_is_not_acknowledged() -> None:
    """Regression: a TxnOffsetCommit whose batch was appended after the
    offsets partition's new coordinator (a new leader epoch) had read the
    log was answered NONE, yet the offsets were pending nowhere: the new
    coordinator's load missed the batch and the old one's state was gone.
    The producer's COMMIT then applied nothing, and the group resumed from
    the older offset (records processed twice).  As the transaction
    coordinator after its writes, the group coordinator now answers
    NOT_COORDINATOR when leadership moved during the append: the client
    retries at the new coordinator."""

    async def main() -> None:
        async with live_coordinator(1) as (broker, live, tp):
            wanted = {("data", 0): (5, -1, None)}
            with leadership_moves_during_produce(broker, live, tp):
                answer = await live.commit_txn_offsets("g", 7, 0, "", -1, None, wanted)
            if answer[("data", 0)] == Errors.NONE:
                await broker.write_txn_markers([TxnMarkerRequest(tp, 7, 0, 1, True)], timeout_ms=1)
                error, found = await live.fetch_offsets("g", [("data", 0)])
                c = found[("data", 0)]
                assert error == Errors.NONE and isinstance(c, Committed) and c.offset == 5, (
                    c
                )  # acknowledged, committed: applied
            else:
                assert answer[("data", 0)] == Errors.NOT_COORDINATOR

    asyncio.run(main())


def test_a_plain_offset_commit_that_lands_after_a_new_coordinator_loaded_is_not_acknowledged() -> None:
    """Regression (older than transactions): an OffsetCommit appended after
    the offsets partition's new coordinator had read the log was answered
    NONE, and the new coordinator never held it: the group resumed from the
    older offset.  It is NOT_COORDINATOR now, and the client commits again."""

    async def main() -> None:
        async with live_coordinator(1) as (broker, live, tp):
            with leadership_moves_during_produce(broker, live, tp):
                answer = await live.commit_offsets("g", "", -1, {("data", 0): (5, -1, None)})
            error, found = await live.fetch_offsets("g", [("data", 0)])
            assert error == Errors.NONE
            held = found[("data", 0)]
            acknowledged = answer[("data", 0)] == Errors.NONE
            assert acknowledged == (isinstance(held, Committed) and held.offset == 5), (answer, held)
            assert answer[("data", 0)] in (Errors.NONE, Errors.NOT_COORDINATOR)

    asyncio.run(main())
