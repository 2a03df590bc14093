"""KIP-890 part 1: leaders verify a transaction's first batch with its
coordinator (real LMDB for the store's rules).

* The guard rules of the store and its sequencer: a first transactional
  batch starts a transaction only with the partition's current guard; a
  marker clears it (the ABA race); the SENTINEL verifies nothing; writers
  without a transactional id are not verified; hypothesis drives random
  interleavings of verifications, markers and appends against a model.
* The leader's shell (:class:`TxnVerification`): Kafka's produce errors for
  the coordinator's answers, fail closed on no answer, guards released.
* The coordinator's answer (:meth:`Transactions.verify`), in Kafka's order.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.broker.txn_verification import TxnVerification, produce_error
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.store import MetadataStore
from partlog.store.verification import SENTINEL, VerificationGuards, verified
from partlog.txn.coordinator import Transactions
from tests.batches import request, wal_key
from tests.clock import Clock
from tests.unit.test_txn_store import T0, batch, make_topic, marker, open_store


def commit_guarded(store: MetadataStore, tp: TopicIdPartition, data: bytes, token: int | None) -> Errors:
    guards = None if token is None else {(tp, int.from_bytes(data[43:51], "big")): token}
    [r] = store.commit_file(wal_key(T0), 1, len(data) + 1, [request(tp, data, byte_offset=1)], guards)
    return r.errors


def test_guard_table_shares_ends_and_clears() -> None:
    g = VerificationGuards(guards_max=2)
    tp = TopicIdPartition(uuid.uuid4(), 0)
    a = g.begin(tp, 1)
    assert a is not None and a != SENTINEL
    assert g.begin(tp, 1) == a  # concurrent verifications share it (Kafka's computeIfAbsent)
    g.end(tp, 1, a)
    assert g.current(tp, 1) == a  # one holder left
    g.end(tp, 1, a)
    assert g.current(tp, 1) == SENTINEL and len(g) == 0
    b = g.begin(tp, 1)
    assert b is not None and b != a  # a new guard: an old verification's token never matches it
    assert g.begin(tp, 2) is not None
    assert g.begin(tp, 3) is None  # full: the leader answers a retriable error
    g.clear([(tp, 1)])
    assert g.current(tp, 1) == SENTINEL
    assert verified(None, SENTINEL, (tp, 1))  # no verification asked: an internal writer
    assert not verified({(tp, 1): SENTINEL}, SENTINEL, (tp, 1))


def test_store_starts_a_transaction_only_with_the_current_guard(tmp_path: Path) -> None:
    with open_store(tmp_path / "s", Clock(T0)) as store:
        tp = make_topic([store])
        v = store.verification
        token = v.begin(tp, 7)
        assert token is not None and token != SENTINEL
        assert commit_guarded(store, tp, batch(7, 0, 0, txn=True), token) == Errors.NONE
        assert store.last_stable_offset(tp) == 0  # the transaction is open at 0
        v.end(tp, 7, token)
        assert v.begin(tp, 7) == SENTINEL  # open: nothing to ask
        assert commit_guarded(store, tp, batch(7, 0, 1, txn=True), SENTINEL) == Errors.NONE
        # The transaction ends; a verification begun before the marker (the
        # coordinator said yes) must not start a new transaction after it.
        late = v.begin(tp, 8)
        assert late is not None
        [m] = store.write_txn_markers([marker(tp, 8, 0, 0, True)], T0)
        assert m.error == Errors.NONE and v.current(tp, 8) == SENTINEL  # the marker cleared the guard
        assert commit_guarded(store, tp, batch(8, 0, 0, txn=True), late) == Errors.INVALID_TXN_STATE
        [m] = store.write_txn_markers([marker(tp, 7, 0, 0, True)], T0)
        assert store.last_stable_offset(tp) == store.high_watermark(tp)  # nothing open
        # The SENTINEL of a transaction that ended meanwhile verifies nothing.
        assert commit_guarded(store, tp, batch(7, 0, 2, txn=True), SENTINEL) == Errors.INVALID_TXN_STATE
        # The group coordinator's batch without a sequence is verified too.
        assert commit_guarded(store, tp, batch(9, 0, -1, txn=True), SENTINEL) == Errors.INVALID_TXN_STATE
        assert store.last_stable_offset(tp) == store.high_watermark(tp)
        # Writers without a transactional id are not verified (as before).
        assert commit_guarded(store, tp, batch(7, 0, 2, txn=True), None) == Errors.NONE
        assert store.check() == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(["begin", "end", "marker", "append", "append_stale"]), max_size=25))
def test_random_interleavings_never_start_an_unverified_transaction(tmp_path: Path, ops: list[str]) -> None:
    """Model: a transaction is open after an append iff one was open, or the
    append carried the current guard; a marker closes it and clears the
    guard.  The store's LSO says whether one is open."""
    path = tmp_path / f"s{abs(hash(tuple(ops)))}"
    with open_store(path, Clock(T0)) as store:
        tp = make_topic([store])
        v = store.verification
        held: list[int] = []  # tokens of verifications in flight (oldest first)
        stale: list[int] = []  # tokens cleared by a marker
        open_txn, seq = False, 0
        for op in ops:
            if op == "begin":
                token = v.begin(tp, 5)
                assert token is not None
                assert (token == SENTINEL) == open_txn
                if token != SENTINEL:
                    held.append(token)
            elif op == "end" and held:
                v.end(tp, 5, held.pop(0))
            elif op == "marker":
                [m] = store.write_txn_markers([marker(tp, 5, 0, 0, False)], T0)
                assert m.error == Errors.NONE
                open_txn = False
                stale += held
                held = []
            elif op in ("append", "append_stale"):
                pool = held if op == "append" else stale
                token = pool[-1] if pool else SENTINEL
                current = v.current(tp, 5)
                error = commit_guarded(store, tp, batch(5, 0, seq, txn=True), token)
                ok = open_txn or (token != SENTINEL and token == current)
                assert (error == Errors.NONE) == ok, (op, token, current, open_txn)
                if ok:
                    seq += 1
                    open_txn = True
            assert (store.last_stable_offset(tp) < store.high_watermark(tp)) == open_txn
        assert store.check() == []


class _Metrics:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.txn_verifications = SimpleNamespace(labels=lambda e: SimpleNamespace(inc=lambda: self.seen.append(e)))


def test_the_leader_maps_answers_and_fails_closed(tmp_path: Path) -> None:
    async def main() -> None:
        with open_store(tmp_path / "s", Clock(T0)) as store:
            tp = make_topic([store])
            metrics = _Metrics()
            tv = TxnVerification(1, store.verification, None, metrics=metrics, leads=lambda tp: True, timeout_ms=50)  # type: ignore[arg-type]
            answers: list[Errors] = []
            strangers: set[int] = set()  # producers the coordinator does not know under the id

            async def verify(tid: str, pid: int, epoch: int, tps: Sequence[TopicIdPartition]) -> list[Errors]:
                if not answers:
                    await asyncio.sleep(10)  # no answer: the leader must not wait for it
                return [Errors.INVALID_TXN_STATE if pid in strangers else answers[0]] * len(tps)

            reqs: Any = [request(tp, batch(3, 0, 0, txn=True), byte_offset=1)]
            # No coordinator known: retriable, nothing appended.
            refused, guards = await tv.verify(reqs, {0: "t"})
            assert refused == {0: Errors.NOT_ENOUGH_REPLICAS} and guards == {}
            tv.register(verify, lambda tid: 1)
            refused, guards = await tv.verify(reqs, {0: "t"})  # times out
            assert refused == {0: Errors.NOT_ENOUGH_REPLICAS} and len(store.verification) == 0
            for coordinator, produce in [
                (Errors.INVALID_TXN_STATE, Errors.INVALID_TXN_STATE),
                (Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH),
                (Errors.CONCURRENT_TRANSACTIONS, Errors.NOT_ENOUGH_REPLICAS),
                (Errors.INVALID_PRODUCER_ID_MAPPING, Errors.INVALID_PRODUCER_ID_MAPPING),
            ]:
                answers[:] = [coordinator]
                assert produce_error(coordinator) == produce
                refused, guards = await tv.verify(reqs, {0: "t"})
                assert refused == {0: produce} and guards == {} and len(store.verification) == 0
            answers[:] = [Errors.NONE]
            refused, guards = await tv.verify(reqs, {0: "t"})
            assert refused == {} and list(guards) == [(tp, 3)] and len(store.verification) == 1
            assert commit_guarded(store, tp, batch(3, 0, 0, txn=True), guards[(tp, 3)]) == Errors.NONE
            tv.release(guards)
            assert len(store.verification) == 0
            # Two producers naming one transactional id are asked about separately.
            strangers.add(6)
            two: Any = [reqs[0], request(tp, batch(6, 0, 0, txn=True), byte_offset=1)]
            refused, guards = await tv.verify(two, {0: "t", 1: "t"})
            assert refused == {1: Errors.INVALID_TXN_STATE} and list(guards) == [(tp, 3)]
            assert guards[(tp, 3)] == SENTINEL  # producer 3's transaction is open: nothing asked
            tv.release(guards)
            # Requests without a transactional id are not asked about.
            refused, guards = await tv.verify(reqs, {})
            assert refused == {} and guards == {}
            assert metrics.seen.count("NONE") == 1 and "NETWORK_EXCEPTION" in metrics.seen

    asyncio.run(main())


def test_a_partition_led_only_after_the_question_is_refused_not_appended_unverified(tmp_path: Path) -> None:
    """Review finding: a partition this broker did not lead when the commit
    was verified was skipped, and leadership arriving while another
    partition's answer was awaited let the store append its first
    transactional batch with no guard.  It is refused now (retriable), as
    Kafka looks the partition up before verifying."""

    async def main() -> None:
        with open_store(tmp_path / "s", Clock(T0)) as store:
            tp1 = make_topic([store])
            tp2 = TopicIdPartition(tp1.topic_id, tp1.partition + 1)
            led = {tp1}
            tv = TxnVerification(1, store.verification, None, metrics=_Metrics(), leads=lambda tp: tp in led)  # type: ignore[arg-type]

            async def verify(tid: str, pid: int, epoch: int, tps: Sequence[TopicIdPartition]) -> list[Errors]:
                led.add(tp2)  # leadership of tp2 arrives meanwhile
                return [Errors.NONE] * len(tps)

            tv.register(verify, lambda tid: 1)
            reqs: Any = [request(tp, batch(3, 0, 0, txn=True), byte_offset=1) for tp in (tp1, tp2)]
            refused, guards = await tv.verify(reqs, {0: "t", 1: "t"})
            assert refused == {1: Errors.NOT_LEADER_OR_FOLLOWER} and list(guards) == [(tp1, 3)]
            tv.release(guards)

    asyncio.run(main())


def test_each_request_is_verified_under_its_own_transactional_id(tmp_path: Path) -> None:
    """Review finding: the commit carried one transactional id per producer
    id, so a client naming another's producer id under its own id in the
    same WAL file could make the other's first batches fail verification.
    Each request is verified under its own id now, as Kafka verifies each
    produce request: the impostor is refused alone, whichever came first."""

    async def main() -> None:
        with open_store(tmp_path / "s", Clock(T0)) as store:
            tp = make_topic([store])
            tv = TxnVerification(1, store.verification, None, metrics=_Metrics(), leads=lambda tp: True)  # type: ignore[arg-type]

            async def verify(tid: str, pid: int, epoch: int, tps: Sequence[TopicIdPartition]) -> list[Errors]:
                ok = (tid, pid) == ("victim", 3)
                return [Errors.NONE if ok else Errors.INVALID_PRODUCER_ID_MAPPING] * len(tps)

            tv.register(verify, lambda tid: 1)
            victim = request(tp, batch(3, 0, 0, txn=True), byte_offset=1)
            impostor = request(tp, batch(3, 0, 0, txn=True), byte_offset=2)
            for ids, bad in (({0: "victim", 1: "impostor"}, 1), ({0: "impostor", 1: "victim"}, 0)):
                reqs: Any = [victim, impostor] if bad == 1 else [impostor, victim]
                refused, guards = await tv.verify(reqs, ids)
                assert refused == {bad: Errors.INVALID_PRODUCER_ID_MAPPING}, refused
                assert list(guards) == [(tp, 3)] and guards[(tp, 3)] != SENTINEL
                tv.release(guards)
            # The impostor alone: refused, and its guard ended.
            refused, guards = await tv.verify([impostor], {0: "impostor"})
            assert refused == {0: Errors.INVALID_PRODUCER_ID_MAPPING} and guards == {}
            assert len(store.verification) == 0

    asyncio.run(main())


def test_a_cancelled_verification_ends_its_guards(tmp_path: Path) -> None:
    """Review finding: a commit cancelled while its coordinator's answer was
    awaited (the sender's connection dropped) leaked its guards; enough of
    them fill the table and refuse every later verification on the leader."""

    async def main() -> None:
        with open_store(tmp_path / "s", Clock(T0)) as store:
            tp = make_topic([store])
            tv = TxnVerification(1, store.verification, None, metrics=_Metrics(), leads=lambda tp: True)  # type: ignore[arg-type]

            async def verify(tid: str, pid: int, epoch: int, tps: Sequence[TopicIdPartition]) -> list[Errors]:
                await asyncio.sleep(100)
                return [Errors.NONE] * len(tps)

            tv.register(verify, lambda tid: 1)
            task = asyncio.ensure_future(tv.verify([request(tp, batch(3, 0, 0, txn=True), byte_offset=1)], {0: "t"}))
            while len(store.verification) == 0:
                await asyncio.sleep(0.01)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert len(store.verification) == 0

    asyncio.run(main())


def test_the_coordinators_answer_in_kafkas_order() -> None:
    txns = Transactions(max_timeout_ms=60_000, expiration_ms=10**9)
    tp = TopicIdPartition(uuid.uuid4(), 0)
    other = TopicIdPartition(tp.topic_id, 1)
    assert txns.verify("", 1, 0, [tp]) == [Errors.INVALID_REQUEST]
    assert txns.verify("t", 1, 0, [tp]) == [Errors.INVALID_PRODUCER_ID_MAPPING]
    got = txns.init_producer_id("t", 60_000, None, T0, lambda: 1)
    assert not isinstance(got, Errors)
    txns.complete(got)
    meta = txns.get("t")
    assert meta is not None
    pid, epoch = meta.producer_id, meta.producer_epoch
    assert txns.verify("t", pid + 1, epoch, [tp]) == [Errors.INVALID_PRODUCER_ID_MAPPING]
    assert txns.verify("t", pid, epoch + 1, [tp]) == [Errors.PRODUCER_FENCED]
    assert txns.verify("t", pid, epoch, [tp]) == [Errors.INVALID_TXN_STATE]  # no transaction open
    added = txns.add_partitions("t", pid, epoch, [tp], T0)
    assert not isinstance(added, Errors)
    txns.complete(added)
    assert txns.verify("t", pid, epoch, [tp, other]) == [Errors.NONE, Errors.INVALID_TXN_STATE]
    ended = txns.end_txn("t", pid, epoch, True, T0)
    assert not isinstance(ended, Errors)
    txns.complete(ended)
    assert txns.verify("t", pid, epoch, [tp]) == [Errors.CONCURRENT_TRANSACTIONS]  # PrepareCommit
