"""The transaction APIs through the front end's handlers, on a fake broker:
a consume-transform-produce round (FindCoordinator key type 1,
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
OffsetFetch require_stable, DescribeTransactions, ListTransactions, EndTxn)
with every answer encoded at the version asked; pending offsets applied by
the COMMIT marker, dropped by an ABORT, and rebuilt by a new group
coordinator's load; Kafka's error codes for old clients."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from types import SimpleNamespace
from typing import Any, TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.errors import Errors
from partlog.kafka.records import TxnMarkerRequest
from partlog.kafka_front.apis import SUPPORTED_VERSIONS, KafkaApis
from partlog.kafka_front.codec import Request, build, encode_response, response_class
from partlog.kafka_front.group_coordinator import Committed, GroupCoordinator
from partlog.kafka_front.handler import Session
from tests.fake_broker import FakeBroker
from tests.group_helpers import assert_a_load_rebuilds, live_coordinator

T = TypeVar("T")
SESSION = Session("127.0.0.1:1")


def _run(body: Callable[[FakeBroker, KafkaApis], Awaitable[T]]) -> T:
    async def main() -> T:
        broker = FakeBroker()
        broker.metadata.add("data", 2)
        apis = KafkaApis(broker.port())
        apis.groups.start()
        try:
            return await body(broker, apis)
        finally:
            await apis.groups.close()
            await apis.txns.close()

    return asyncio.run(main())


async def _call(apis: KafkaApis, api_key: int, version: int, **body: Any) -> Any:
    """Call the handler of ``api_key`` and return its answer as the client
    would read it: built and encoded at ``version``."""
    assert SUPPORTED_VERSIONS[api_key][0] <= version <= SUPPORTED_VERSIONS[api_key][1]
    req = Request(api_key, version, 1, "test", None)
    answer = await apis.handlers[api_key](req, SimpleNamespace(**body), SESSION)
    assert isinstance(answer, Mapping)
    entity = build(response_class(api_key, version), answer)
    encode_response(req, entity)
    return entity


def _ns(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(**kw)


async def _settle(apis: KafkaApis) -> None:
    for _ in range(50):
        await asyncio.sleep(0)
    for part in list(apis.txns._parts.values()):
        if part.tasks:
            await asyncio.wait(list(part.tasks), timeout=5)


async def _init(apis: KafkaApis, tid: str = "t", version: int = 4) -> tuple[int, int]:
    found = await _call(apis, 10, 4, key_type=1, coordinator_keys=(tid,))
    assert [c.error_code for c in found.coordinators] == [0]
    r = await _call(apis, 22, version, transactional_id=tid, transaction_timeout=10_000, producer_id=-1,
                    producer_epoch=-1)  # fmt: skip
    assert r.error_code == 0
    return int(r.producer_id), int(r.producer_epoch)


def _add(tid: str, pid: int, epoch: int, topics: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": tuple(_ns(name=n, partitions=ps) for n, ps in topics.items())}  # fmt: skip


def _offsets(tid: str, pid: int, epoch: int, offset: int) -> dict[str, Any]:
    part = _ns(partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=None)
    return {"transactional_id": tid, "group_id": "g", "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": (_ns(name="data", partitions=(part,)),)}  # fmt: skip


async def _fetch(apis: KafkaApis, stable: bool) -> tuple[int, int]:
    r = await _call(apis, 9, 7, group_id="g", topics=(_ns(name="data", partition_indexes=(0,)),),
                    require_stable=stable)  # fmt: skip
    [p] = r.topics[0].partitions
    return int(p.error_code), int(p.committed_offset)


def test_a_transaction_with_offsets_commits() -> None:
    async def body(broker: FakeBroker, apis: KafkaApis) -> None:
        pid, epoch = await _init(apis)
        r = await _call(apis, 24, 3, **_add("t", pid, epoch, {"data": (0, 1), "nope": (0,)}))
        codes = {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
                 for p in t.results_by_partition}  # fmt: skip
        assert codes == {("data", 0): Errors.OPERATION_NOT_ATTEMPTED, ("data", 1): Errors.OPERATION_NOT_ATTEMPTED,
                         ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}  # fmt: skip
        r = await _call(apis, 24, 3, **_add("t", pid, epoch, {"data": (0, 1)}))
        assert {p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition} == {0}
        r = await _call(apis, 25, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, group_id="g")
        assert r.error_code == 0
        r = await _call(apis, 28, 3, **_offsets("t", pid, epoch, 42))
        assert [p.error_code for p in r.topics[0].partitions] == [0]
        assert await _fetch(apis, True) == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
        assert await _fetch(apis, False) == (0, -1)
        r = await _call(apis, 65, 0, transactional_ids=("t", "unknown"))
        ongoing, unknown = r.transaction_states
        assert (ongoing.error_code, ongoing.transaction_state, ongoing.producer_id) == (0, "Ongoing", pid)
        assert {t.topic: set(t.partitions) for t in ongoing.topics} == {
            "data": {0, 1},
            "__consumer_offsets": {
                next(iter(set(t.partitions))) for t in ongoing.topics if t.topic == "__consumer_offsets"
            },
        }
        assert unknown.error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND
        r = await _call(apis, 66, 1, state_filters=("Ongoing", "Bogus"), producer_id_filters=(), duration_filter=-1)
        assert r.error_code == 0 and list(r.unknown_state_filters) == ["Bogus"]
        assert [(s.transactional_id, s.transaction_state) for s in r.transaction_states] == [("t", "Ongoing")]
        r = await _call(apis, 26, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=True)
        assert r.error_code == 0
        await _settle(apis)
        assert await _fetch(apis, True) == (0, 42)
        assert len(broker.markers) == 3 and all(m.committed for m in broker.markers)
        # A new group coordinator rebuilds the committed offset from the log.
        fresh = GroupCoordinator(broker.port())
        error, found = await fresh.fetch_offsets("g", [("data", 0)], require_stable=True)
        c = found[("data", 0)]
        assert error == Errors.NONE and not isinstance(c, Errors) and c is not None and c.offset == 42

    _run(body)


def test_aborted_offsets_are_dropped_and_pending_ones_survive_a_load() -> None:
    async def body(broker: FakeBroker, apis: KafkaApis) -> None:
        pid, epoch = await _init(apis)
        await _call(apis, 25, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, group_id="g")
        await _call(apis, 28, 3, **_offsets("t", pid, epoch, 7))
        r = await _call(apis, 26, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=False)
        assert r.error_code == 0
        await _settle(apis)
        assert await _fetch(apis, True) == (0, -1)
        await _call(apis, 26, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=False)
        await _call(apis, 25, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, group_id="g")
        await _call(apis, 28, 3, **_offsets("t", pid, epoch, 9))
        fresh = GroupCoordinator(broker.port())
        error, found = await fresh.fetch_offsets("g", [("data", 0)], require_stable=True)
        assert (error, found) == (Errors.NONE, {("data", 0): Errors.UNSTABLE_OFFSET_COMMIT})

    _run(body)


def test_old_clients_get_invalid_producer_epoch_when_fenced() -> None:
    async def body(broker: FakeBroker, apis: KafkaApis) -> None:
        pid, epoch = await _init(apis, version=1)
        await _init(apis, version=1)
        r = await _call(apis, 26, 1, transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=True)
        assert r.error_code == Errors.INVALID_PRODUCER_EPOCH
        r = await _call(apis, 26, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=True)
        assert r.error_code == Errors.PRODUCER_FENCED
        r = await _call(apis, 24, 0, **_add("t", pid, epoch, {"data": (0,)}))
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == (
            Errors.INVALID_PRODUCER_EPOCH
        )
        r = await _call(apis, 22, 4, transactional_id="t", transaction_timeout=10_000, producer_id=pid,
                        producer_epoch=-1)  # fmt: skip
        assert r.error_code == Errors.INVALID_REQUEST
        # As Kafka's KafkaApis.getCoordinator: the empty id has a coordinator
        # (which refuses it: tests/system/test_kafka_error_codes.py).
        r = await _call(apis, 10, 2, key_type=1, key="")
        assert r.error_code == Errors.NONE

    _run(body)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["plain", "txn", "commit", "abort"]), st.sampled_from([1, 2]),
                          st.integers(0, 1), st.integers(0, 99)), max_size=12))  # fmt: skip
def test_pending_offsets_held_live_are_those_a_load_rebuilds(ops: list[tuple[str, int, int, int]]) -> None:
    """Plain and transactional commits and markers in any order: what the
    coordinator holds (offsets and pending) is what a new one loads."""

    async def main() -> None:
        async with live_coordinator(2) as (broker, live, tp):
            # The model: per partition the (log position, offset) of the
            # latest record that counts (plain, or of a committed transaction).
            model: dict[int, tuple[int, int]] = {}
            pending: dict[int, dict[int, tuple[int, int]]] = {}
            for at, (op, pid, p, offset) in enumerate(ops):
                wanted = {("data", p): (offset, -1, None)}
                if op == "plain":
                    assert await live.commit_offsets("g", "", -1, wanted) == {("data", p): Errors.NONE}
                    model[p] = max(model.get(p, (-1, -1)), (at, offset))
                elif op == "txn":
                    got = await live.commit_txn_offsets("g", pid, 0, "", -1, None, wanted)
                    assert got == {("data", p): Errors.NONE}
                    pending.setdefault(pid, {})[p] = (at, offset)
                else:
                    await broker.write_txn_markers([TxnMarkerRequest(tp, pid, 0, 0, op == "commit")], timeout_ms=1)
                    for q, held_at in pending.pop(pid, {}).items():
                        if op == "commit":
                            model[q] = max(model.get(q, (-1, -1)), held_at)
            _error, found = await live.fetch_offsets("g", [("data", 0), ("data", 1)])
            assert {k[1]: c.offset for k, c in found.items() if isinstance(c, Committed)} == {
                q: o for q, (_, o) in model.items()}  # fmt: skip
            await assert_a_load_rebuilds(broker, live)

    asyncio.run(main())


def test_a_marker_heard_during_a_load_that_the_load_replays_is_not_applied_twice() -> None:
    """Regression: markers heard while an offsets partition loads were
    queued and applied after it, also those the load had replayed; a COMMIT
    replayed so then applied the producer's *next* transaction's offsets,
    still pending.  The listener now names the marker's offset, and only
    markers at or past the end the load read to are applied afterwards."""

    async def main() -> None:
        async with live_coordinator(1) as (broker, live, tp):
            wanted = {("data", 0): (5, -1, None)}
            assert await live.commit_txn_offsets("g", 1, 0, "", -1, None, wanted) == {("data", 0): Errors.NONE}
            marker_offset = broker.log_end_offset(tp)
            await broker.write_txn_markers([TxnMarkerRequest(tp, 1, 0, 0, True)], timeout_ms=1)
            later = {("data", 0): (9, -1, None)}
            assert await live.commit_txn_offsets("g", 1, 0, "", -1, None, later) == {("data", 0): Errors.NONE}

            fresh = GroupCoordinator(broker.port())
            fetch = broker.fetch

            async def fetch_hearing_the_marker(*args: Any, **kw: Any) -> Any:
                fresh.on_marker(tp, 1, True, marker_offset)  # heard late, during the load
                return await fetch(*args, **kw)

            broker.fetch = fetch_hearing_the_marker  # type: ignore[method-assign]
            error, found = await fresh.fetch_offsets("g", [("data", 0)], require_stable=False)
            assert error == Errors.NONE
            committed = found[("data", 0)]
            assert isinstance(committed, Committed) and committed.offset == 5  # not 9: still pending
            [part] = fresh._parts.values()
            assert part.pending.get(1)

    asyncio.run(main())


_INT16 = st.integers(-(1 << 15), (1 << 15) - 1)
_INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_TIDS = st.one_of(st.sampled_from(["", "t", "x" * 5000]), st.text(max_size=20))
_TOPICS = st.dictionaries(st.sampled_from(["data", "nope", "__transaction_state", "__consumer_offsets", ""]),
                          st.lists(_INT32, max_size=4).map(tuple), max_size=3)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("init"), _TIDS, _INT32, _INT64, _INT16),
            st.tuples(st.just("add"), _TIDS, _INT64, _INT16, _TOPICS),
            st.tuples(st.just("offsets"), _TIDS, _INT64, _INT16, st.text(max_size=8)),
            st.tuples(st.just("end"), _TIDS, _INT64, _INT16, st.booleans()),
            st.tuples(st.just("describe"), st.lists(_TIDS, max_size=3)),
        ),
        max_size=8,
    )
)
def test_hostile_values_get_kafka_errors_never_exceptions(ops: list[tuple[Any, ...]]) -> None:
    """Any values in the transaction APIs' fields (ids of any length, epochs,
    producer ids and timeouts out of range, unknown and internal topics):
    every answer encodes at its version, with an error where Kafka has one."""

    async def body(broker: FakeBroker, apis: KafkaApis) -> None:
        await _init(apis)  # one id that exists, so some calls get further
        for op in ops:
            if op[0] == "init":
                _, tid, timeout, pid, epoch = op
                await _call(apis, 22, 4, transactional_id=tid, transaction_timeout=timeout, producer_id=pid,
                            producer_epoch=epoch)  # fmt: skip
            elif op[0] == "add":
                _, tid, pid, epoch, topics = op
                await _call(apis, 24, 3, **_add(tid, pid, epoch, topics))
            elif op[0] == "offsets":
                _, tid, pid, epoch, group = op
                await _call(apis, 25, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)
            elif op[0] == "end":
                _, tid, pid, epoch, commit = op
                await _call(apis, 26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
            else:
                await _call(apis, 65, 0, transactional_ids=tuple(op[1]))
        await _settle(apis)

    _run(body)


def test_only_transactional_batches_without_a_sequence_are_refused_from_clients() -> None:
    """The group coordinator's TxnOffsetCommit batches carry no sequence
    (the leader skips the sequence check for them); a client's may not."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from partlog.kafka.batch_header import unsequenced_transactional

    def batch(transactional: bool, seq: int) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional, producer_id=5,
                                      producer_epoch=0, base_sequence=seq, batch_size=1 << 20)  # fmt: skip
        b.append(0, timestamp=1, key=None, value=b"v", headers=[])
        return bytes(b.build())

    assert unsequenced_transactional(batch(True, -1))
    assert not unsequenced_transactional(batch(True, 0))
    assert not unsequenced_transactional(batch(False, -1))
    assert not unsequenced_transactional(b"short")
