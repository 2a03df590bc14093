"""The simulation's state checker: each invariant a function over a
read-only view of the cluster (:class:`ClusterView`), what the checks
have observed so far (:class:`Observed`), and the run's journal, where a
broken invariant is recorded and ends the run.

Checked as events happen and at the end:

* no WAL object is deleted while any broker's store, leader or follower,
  references it (checked inside DeleteObjects, before the delete:
  :func:`check_delete`), and none is referenced afterwards;
* each broker's file-reference index equals a recount from its log
  (``MetadataStore.check``, periodically and at the end);
* the controller's leader epochs never go backwards, and a partition has
  one leader per epoch;
* a leader's high watermark never goes backwards within its epoch, never
  passes an ISR member's log end, and its log start never passes it;
* every record acknowledged with acks=all is read back at the offset its
  acknowledgement gave (unless DeleteRecords or retention removed it); an
  idempotent producer's exactly once, and one producer's records to one
  partition in the order they were sent (:func:`check_acknowledged`,
  :func:`check_exactly_once_in_order`);
* liveness: once faults stop, orphans past the age gate are deleted within
  a few walmgr cycles (:func:`check_orphans_deleted`).
* WAL rotation (periodically, :func:`check_rotation`): no broker keeps its
  open WAL file past its commit interval, nor, with nothing in flight and a
  token in its PUT budget, past its rotation grace.

With transactional producers (:mod:`simulations.dst.txn`):

* no replica's LSO passes its HWM, nor the first acknowledged offset of a
  transaction the coordinator has not decided (periodically:
  :func:`check_stable_offsets`);
* a read_committed reader is never given a record of a transaction that is
  aborted or not yet decided committed (as it reads, from the leaders:
  :func:`check_read_committed`; at the end, every replica: :func:`check_replica_reads`);
* every committed transaction is visible in all its partitions, each
  record once at its acknowledged offset, and an aborted one in none
  (:func:`check_transactions_atomic`);
* once faults stop and the markers are written, no leader's LSO stays
  below its HWM (no hanging transaction: :func:`hanging_transactions`).

The checks read the stores and the controller's snapshot; they change
nothing in the cluster.  The workload checks what it can as answers come
(:mod:`simulations.dst.workload`: no offset acknowledged twice, no gap
in what a reader reads).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from partlog.broker.server import Broker
from partlog.controller.cluster_meta import PartitionInfo
from partlog.controller.server import ControllerServer
from partlog.kafka.records import TopicIdPartition
from partlog.store import MetadataStore, StoreError
from partlog.store.layout import SEGMENT_SWAP_DEADLINE_MS_DEFAULT
from partlog.tiered.remote_storage import LOG_SUFFIX, TIERED_PREFIX_DEFAULT
from partlog.wal.key import SegmentKeyError, parse_segment_key
from simulations.dst.config import COMMIT_DEADLINE_MS, GRACE_MS, MAX_CLOCK_SKEW_MS, WALMGR_CYCLE_MS
from simulations.dst.ctp import parse_output
from simulations.dst.journal import Journal
from simulations.dst.runtime import VirtualLoop
from simulations.dst.store import SimObjectStore
from simulations.dst.txn import TxnLedger
from simulations.dst.workload import Ledger
from walmgr.daemon import Walmgr


class ClusterView(Protocol):
    """What the checks read of :class:`simulations.dst.cluster.Cluster`."""

    @property
    def loop(self) -> VirtualLoop: ...
    @property
    def controller(self) -> ControllerServer | None: ...
    @property
    def brokers(self) -> Mapping[int, Broker]: ...
    @property
    def partitions(self) -> Sequence[TopicIdPartition]: ...
    @property
    def extra_partitions(self) -> Sequence[TopicIdPartition]: ...
    @property
    def objects(self) -> SimObjectStore: ...
    @property
    def walmgr(self) -> Walmgr | None: ...
    @property
    def walmgr_task(self) -> asyncio.Task[Any] | None: ...
    def stores(self) -> Iterator[tuple[int, MetadataStore, bool]]: ...
    @property
    def skew_ms(self) -> Mapping[int, int]: ...


@dataclass
class Observed:
    """What the checks have seen so far (to compare the next look with)."""

    # Controller epochs seen per partition: leader epoch -> leader.
    epoch_leaders: dict[TopicIdPartition, dict[int, int]] = field(default_factory=dict)
    max_epoch: dict[TopicIdPartition, int] = field(default_factory=dict)
    hwm_seen: dict[tuple[int, TopicIdPartition, int], int] = field(default_factory=dict)
    # The controller's last decision per partition (kept while it is down:
    # nothing changes leaders or ISRs then).
    partition_info: dict[TopicIdPartition, PartitionInfo] = field(default_factory=dict)
    # Deleted keys a stale replica's divergent tail still references
    # (reported once, as events): broker -> keys.
    stale_references: dict[int, set[str]] = field(default_factory=dict)
    # Keys walmgr was about to delete that a broker's log did not reference
    # then: it must never gain them (a late fetch answer would; docs/design/
    # release-grace.md).  broker -> keys.
    clean_at_delete: dict[int, set[str]] = field(default_factory=dict)
    # Each broker's clock skew at the last rotation check.
    skew_seen: dict[int, int] = field(default_factory=dict)

    def forget_hwms(self, bid: int) -> None:
        """A broker lost its unsynced writes: its HWMs may be back where
        they were (the monotonic-HWM invariant is for a leader within its
        epoch, and it leads no more), and its log may hold again references
        it had let go of."""
        for key in [key for key in self.hwm_seen if key[0] == bid]:
            del self.hwm_seen[key]
        self.clean_at_delete.pop(bid, None)


def check_controller(cluster: ClusterView, observed: Observed, journal: Journal) -> None:
    """Leader epochs never go back, one leader per epoch; remembers the
    controller's decisions (the other checks judge by them)."""
    if cluster.controller is None or cluster.controller._controller is None:
        return
    for t in cluster.controller.controller.snapshot().topics:
        for p, info in enumerate(t.partitions):
            tp = TopicIdPartition(t.topic_id, p)
            if info.leader_epoch < observed.max_epoch.get(tp, -1):
                journal.violated(f"{tp}: leader epoch went back from {observed.max_epoch[tp]} to {info.leader_epoch}")
            observed.max_epoch[tp] = info.leader_epoch
            observed.partition_info[tp] = info
            seen = observed.epoch_leaders.setdefault(tp, {})
            if seen.setdefault(info.leader_epoch, info.leader) != info.leader:
                journal.violated(
                    f"{tp}: two leaders at epoch {info.leader_epoch}: {seen[info.leader_epoch]}, {info.leader}"
                )


def check_delete(cluster: ClusterView, observed: Observed, journal: Journal, keys: Any) -> None:
    """Before a DeleteObjects: no key may be referenced by the log of a
    replica that is, or can become, authoritative for its partition:
    the leader or an ISR member as the controller last decided (its
    tail above the HWM included: an ISR member can be elected with it).
    A stale replica outside the ISR (a zombie leader, a follower that
    fell out) may still hold a divergent tail that references the key:
    it truncates that tail before it can lead or rejoin the ISR, so it
    is reported as an event, not a violation (design.md)."""
    wanted = set(keys)
    for key in sorted(wanted):
        if key.startswith(TIERED_PREFIX_DEFAULT + "/"):
            _check_segment_delete(cluster, key, journal)
    check_controller(cluster, observed, journal)  # the controller's decisions as of now
    for bid, store, crashed in cluster.stores():
        # (What its log holds: the release grace answers walmgr, not this.)
        held = store.references_held(wanted)
        observed.clean_at_delete.setdefault(bid, set()).update(wanted - held)
        if not held:
            continue
        for tp, offset, key in _references(_all_partitions(cluster), store, held):
            info = observed.partition_info.get(tp)
            authoritative = info is None or bid == info.leader or bid in info.isr
            where = f"{tp} offset {offset} on broker {bid}{' (crashed)' if crashed else ''}"
            if authoritative:
                role = "leader" if info is not None and bid == info.leader else "ISR member"
                journal.violated(f"walmgr deleted {key} while it is referenced at {where}, the partition's {role}")
            journal.event(f"deleted {key} still referenced by a stale replica's divergent tail: {where}")
            observed.stale_references.setdefault(bid, set()).add(key)


def _all_partitions(cluster: ClusterView) -> list[TopicIdPartition]:
    """The fuzz topic's partitions and the other topics' (consume-transform-produce)."""
    return [*cluster.partitions, *cluster.extra_partitions]


def _references(
    partitions: Sequence[TopicIdPartition], store: MetadataStore, keys: set[str]
) -> Iterator[tuple[TopicIdPartition, int, str]]:
    """(partition, offset, key) for every entry of ``store`` referencing one of ``keys``."""
    for tp in partitions:
        try:
            start = store.partition_state(tp)["log_start_offset"]
            entries = store.read_log(tp, start, 1 << 40).entries
        except (KeyError, StoreError):
            continue
        for e in entries:
            if e.object_key in keys:
                yield tp, int.from_bytes(e.header[:8], "big", signed=True), e.object_key


def check_hwms(cluster: ClusterView, observed: Observed, journal: Journal) -> None:
    """A leader's HWM never goes back within its epoch, never passes an
    ISR member's log end, and its log start never passes it."""
    for bid, broker in cluster.brokers.items():
        if broker.store._closed:
            continue
        for tp in _all_partitions(cluster):
            epoch = broker.replicas.leader_epoch(tp)
            if epoch is None or epoch < 0:
                continue
            try:
                state = broker.store.partition_state(tp)
            except (StoreError, KeyError):
                continue
            hwm = int(state["high_watermark"])
            key = (bid, tp, epoch)
            if hwm < observed.hwm_seen.get(key, -1):
                journal.violated(
                    f"broker {bid} {tp} epoch {epoch}: HWM went back from {observed.hwm_seen[key]} to {hwm}"
                )
            observed.hwm_seen[key] = hwm
            # The HWM never passes what an ISR member holds: every member
            # of the controller's ISR (the live ones) has the committed
            # entries, so any of them can be elected without losing one.
            info = observed.partition_info.get(tp)
            if info is None or info.leader != bid or info.leader_epoch != epoch:
                continue
            # On a leader, retention and DeleteRecords stop at the HWM
            # (Kafka: the log start never passes it); past it they would
            # remove entries not yet committed, acknowledged a moment later.
            if state["log_start_offset"] > hwm:
                journal.violated(f"broker {bid} {tp}: log start {state['log_start_offset']} passes the HWM {hwm}")
            for m in info.isr:
                member = cluster.brokers.get(m)
                if m == bid or member is None or member.store._closed:
                    continue
                try:
                    leo = member.store.log_end_offset(tp)
                except (StoreError, KeyError):
                    continue
                if leo < hwm:
                    journal.violated(
                        f"{tp}: leader {bid}'s HWM {hwm} (epoch {epoch}) passes ISR member {m}'s log end {leo}"
                    )


def check_stores(cluster: ClusterView, journal: Journal) -> None:
    """Each broker's file-reference index equals a recount of its log."""
    for bid, store, _ in cluster.stores():
        problems = store.check()
        if problems:
            journal.violated(f"broker {bid} store: {problems[:3]}")


def check_no_new_references(cluster: ClusterView, observed: Observed, journal: Journal) -> None:
    """After walmgr deleted an object, no leader or ISR member may gain
    a reference to it (a commit that came after the gate passed), and no
    broker whose log did not reference it when walmgr deleted it may gain
    one (a fetch answer applied late: docs/design/release-grace.md)."""
    gone = set(cluster.objects.deleted)
    if not gone:
        return
    for bid, broker in sorted(cluster.brokers.items()):
        if broker.store._closed:
            continue
        held = broker.store.references_held(gone) - observed.stale_references.get(bid, set())
        if not held:
            continue
        gained = held & observed.clean_at_delete.get(bid, set())
        for tp, offset, key in _references(_all_partitions(cluster), broker.store, gained):
            journal.violated(f"{tp} offset {offset} on broker {bid} references {key}, gained after walmgr deleted it")
        for tp, offset, key in _references(_all_partitions(cluster), broker.store, held):
            info = observed.partition_info.get(tp)
            if info is None or bid == info.leader or bid in info.isr:
                journal.violated(f"{tp} offset {offset} on broker {bid} references {key}, deleted by walmgr")
            observed.stale_references.setdefault(bid, set()).add(key)


async def check_periodically(cluster: ClusterView, observed: Observed, journal: Journal) -> None:
    """The checker's loop: every 0.5 virtual s, and the stores every 10 s."""
    n = 0
    while True:
        await asyncio.sleep(0.5)
        check_controller(cluster, observed, journal)
        check_no_new_references(cluster, observed, journal)
        check_hwms(cluster, observed, journal)
        check_rotation(cluster, observed, journal)
        n += 1
        if n % 20 == 0:
            check_stores(cluster, journal)


# How late a broker's rotation timer may run in the virtual loop (callbacks
# due at one instant run in some order; the checker may come first).
ROTATION_SLACK_MS = 10


def check_rotation(cluster: ClusterView, observed: Observed, journal: Journal) -> None:
    """The rotation rule (partlog.produce.rotation) applied here to each
    live broker's pipeline state: its open file is no older than its
    interval, and with nothing in flight and a token in the budget (for
    ROTATION_SLACK_MS already) no older than its grace (nor open since the
    broker went idle).  A broker whose
    clock jumped since the last look is skipped (its times mix offsets)."""
    for bid, broker in cluster.brokers.items():
        if broker.store._closed or broker._stopping:
            continue
        skew = cluster.skew_ms[bid]
        if observed.skew_seen.get(bid) != skew:
            observed.skew_seen[bid] = skew
            continue
        rotation = broker.pipeline.rotation
        opened = rotation.opened_ms
        if opened is None:
            continue
        now = broker.clock.wall_ms()
        if now > opened + rotation.commit_interval_ms + ROTATION_SLACK_MS:
            journal.violated(f"broker {bid}: a WAL file open {now - opened} ms, past its commit interval")
        idle = rotation.idle_since_ms
        # A token that came within the slack may not have been ticked yet.
        if broker.pipeline.segments_open or idle is None or not rotation.budget.has_token(now - ROTATION_SLACK_MS):
            continue
        due = max(opened + rotation.rotation_grace_ms, idle)
        if now > due + ROTATION_SLACK_MS:
            journal.violated(
                f"broker {bid}: a WAL file open {now - opened} ms with nothing in flight for {now - idle} ms "
                f"and a PUT token (grace {rotation.rotation_grace_ms} ms)"
            )


# What the verifier read back: (partition, offset) -> value.
Read = dict[tuple[TopicIdPartition, int], bytes]


def check_acknowledged(ledger: Ledger, read: Read, start: Mapping[TopicIdPartition, int], journal: Journal) -> None:
    """Every acks=all acknowledgement at or above its partition's log
    start (``start``: where DeleteRecords and retention left it) is read
    back at its offset."""
    for where, value in ledger.acked.items():
        if where[1] < start.get(where[0], 0):
            continue
        got = read.get(where)
        if got != value:
            journal.violated(f"{where[0]} offset {where[1]}: acknowledged {value!r}, read {got!r}")


def lost_acks1(ledger: Ledger, read: Read, start: Mapping[TopicIdPartition, int]) -> int:
    """The acks=1 acknowledgements not read back (allowed: a failover may lose them)."""
    lost = 0
    for where, value in ledger.acked1.items():
        if where[1] >= start.get(where[0], 0) and read.get(where) != value:
            lost += 1
    return lost


def check_exactly_once_in_order(
    ledger: Ledger, read: Read, start: Mapping[TopicIdPartition, int], journal: Journal
) -> None:
    """Every record read was sent; an idempotent producer's acknowledged
    records are read once, and in the order sent per partition."""
    by_value: dict[bytes, list[tuple[TopicIdPartition, int]]] = {}
    for where, value in read.items():
        by_value.setdefault(value, []).append(where)
    acked_values = set(ledger.acked.values()) | set(ledger.acked_unplaced)
    for value, places in by_value.items():
        if value not in ledger.sent:
            journal.violated(f"{places[0][0]} offset {places[0][1]}: read {value!r}, which no producer sent")
        if len(places) > 1 and value in acked_values and ledger.kind_of_value(value) == "idempotent":
            journal.violated(f"{value!r} read {len(places)} times: {places[:3]}")
    for value, tp in ledger.acked_unplaced.items():
        if value not in by_value and start.get(tp, 0) > 0:
            continue  # maybe below the log start DeleteRecords or retention set
        if [t for t, _ in by_value.get(value, ())] != [tp]:
            journal.violated(f"{value!r} acknowledged (offset unknown) on {tp}, read at {by_value.get(value)}")
    for (name, tp), sent in ledger.sent_order.items():
        if ledger.kind_of[name] != "idempotent":
            continue  # retries may reorder and duplicate without idempotence
        offsets = {v: o for (t, o), v in read.items() if t == tp}
        placed = [offsets[v] for v in sent if v in offsets]
        if placed != sorted(placed):
            journal.violated(f"{name} {tp}: records read out of the order sent")


async def check_orphans_deleted(cluster: ClusterView, journal: Journal) -> None:
    """Liveness: objects nobody references, past the age gate, are
    deleted within a few walmgr cycles once the faults stopped."""
    gate_s = (COMMIT_DEADLINE_MS + MAX_CLOCK_SKEW_MS + GRACE_MS) / 1000
    await asyncio.sleep(gate_s + 1)
    orphans = _orphans(cluster, gate_s)
    for _ in range(6):
        if not orphans:
            return
        await asyncio.sleep(WALMGR_CYCLE_MS / 1000 * 2)
        orphans = _orphans(cluster, gate_s)
    if orphans:
        why = []
        for k in sorted(orphans)[:3]:
            rec = cluster.walmgr.registry.get(k) if cluster.walmgr is not None and cluster.walmgr.registry else None
            why.append(f"{k} ({'untracked' if rec is None else f'{rec.state.name}: {rec.note}'})")
        task = cluster.walmgr_task
        state = "walmgr not running" if task is None else "walmgr running"
        if task is not None and task.done():
            exc = None if task.cancelled() else task.exception()
            state = f"walmgr's loop ended: {'cancelled' if exc is None else repr(exc)}"
        journal.violated(f"{len(orphans)} orphans past the gate not deleted ({state}): {'; '.join(why)}")


def _check_segment_delete(cluster: ClusterView, key: str, journal: Journal) -> None:
    """A tiered segment's object (docs/design/tiered-gate.md): never one a
    leader may still swap in (every running broker's clock puts its key past
    the swap deadline), an index only once its .log is gone; references are
    checked with the WAL objects' (a segments row counts)."""
    try:
        parsed = parse_segment_key(key)
    except SegmentKeyError:
        journal.violated(f"walmgr deleted {key}, under the tiered prefix but not a segment key")
        return
    if parsed.suffix != LOG_SUFFIX and parsed.stem + LOG_SUFFIX in cluster.objects.objects:
        journal.violated(f"walmgr deleted {key} while its .log exists")
    for bid, broker in cluster.brokers.items():
        age = broker.clock.wall_ms() - parsed.created_ms
        if not (broker.store._closed or broker._stopping) and age <= SEGMENT_SWAP_DEADLINE_MS_DEFAULT:
            journal.violated(f"walmgr deleted {key}, {age} ms old by broker {bid}'s clock: it may still be swapped in")


def _orphans(cluster: ClusterView, gate_s: float) -> set[str]:
    now = cluster.loop.time()
    # WAL objects only: the segment gate (the swap deadline, minutes) is longer than a run.
    old = {
        k
        for k, (_, at) in cluster.objects.objects.items()
        if now - at > gate_s + 2 and not k.startswith(TIERED_PREFIX_DEFAULT + "/")
    }
    for _, store, _ in cluster.stores():
        old -= store.referenced_files(old)
    return old


# ------------------------------------------------------------ transactions


def check_stable_offsets(
    cluster: ClusterView, txns: TxnLedger, journal: Journal, partitions: Sequence[TopicIdPartition]
) -> None:
    """On every live replica: the LSO never passes the HWM, nor the first
    acknowledged offset, still in that replica's log, of a transaction open
    at the coordinator (no marker of it exists, so its records are
    unstable).  Records below the log start are gone: a replica that
    restarted its log there (``reset_to``) keeps no producer-state snapshot
    of a transaction that began below it, so its LSO may pass the start
    where Kafka's stays at it, without passing any record of that
    transaction (docs/design/transactions-leaders.md)."""
    undecided: dict[TopicIdPartition, list[tuple[int, str]]] = {}
    for txn in txns.open.values():
        for value, offset in txn.acked.items():
            if offset >= 0:
                undecided.setdefault(txn.sent[value], []).append((offset, txn.key))
    for bid, broker in sorted(cluster.brokers.items()):
        if broker.store._closed:
            continue
        for tp in partitions:
            try:
                lso = broker.store.last_stable_offset(tp)
                hwm = broker.store.high_watermark(tp)
                start = broker.store.log_start_offset(tp)
            except (StoreError, KeyError):
                continue
            if lso > hwm:
                journal.violated(f"broker {bid} {tp}: LSO {lso} passes the HWM {hwm}")
            first, key = min(((o, k) for o, k in undecided.get(tp, ()) if o >= start), default=(1 << 62, ""))
            if lso > first:
                journal.violated(
                    f"broker {bid} {tp}: LSO {lso} passes offset {first} of open transaction {key} (log start {start})"
                )


def check_read_committed(txns: TxnLedger, journal: Journal, tp: TopicIdPartition, offset: int, value: bytes) -> None:
    """A record a read_committed reader was given: not of a transaction
    aborted or still undecided (not yet stable)."""
    txn = txns.txn_of(value)
    if txn is None:
        return  # not transactional
    if txn.outcome != "commit":
        state = "aborted" if txn.outcome == "abort" else "not decided (past the LSO)"
        journal.violated(f"{tp} offset {offset}: read_committed returned {value!r} of a transaction {state}")


def check_replica_reads(
    txns: TxnLedger, reads: Mapping[tuple[int, TopicIdPartition], Mapping[int, bytes]], journal: Journal
) -> None:
    """Every replica's READ_COMMITTED read (the end): no record of a transaction not committed."""
    for (bid, tp), got in sorted(reads.items(), key=lambda kv: (kv[0][0], kv[0][1].partition)):
        for offset, value in sorted(got.items()):
            txn = txns.txn_of(value)
            if txn is not None and txn.outcome != "commit":
                journal.violated(
                    f"broker {bid} {tp} offset {offset}: a READ_COMMITTED fetch returned {value!r} of a "
                    f"transaction {'aborted' if txn.outcome == 'abort' else 'never decided'}"
                )


def check_transactions_atomic(
    txns: TxnLedger,
    leader_reads: Mapping[TopicIdPartition, Mapping[int, bytes]],
    start: Mapping[TopicIdPartition, int],
    journal: Journal,
) -> None:
    """Every transaction decided; a committed one visible in all its
    partitions (each acknowledged record once, at its offset, unless below
    the log start), an aborted one in none.  ``leader_reads``: each
    partition's READ_COMMITTED read from its leader, from the log start
    ``start``."""
    where: dict[bytes, list[tuple[TopicIdPartition, int]]] = {}
    for tp, got in leader_reads.items():
        for offset, value in got.items():
            where.setdefault(value, []).append((tp, offset))
    for key, txn in sorted(txns.txns.items()):
        if txn.outcome is None:
            journal.violated(f"transaction {key} never decided once the faults stopped")
        if txn.outcome == "abort":
            seen = [v for v in txn.sent if v in where]
            if seen:
                journal.violated(f"aborted transaction {key}: {seen[0]!r} visible at {where[seen[0]]}")
            continue
        missing = []
        for value, offset in txn.acked.items():
            tp = txn.sent[value]
            if tp not in leader_reads:
                continue  # no leader read (none known at the end)
            places = where.get(value, [])
            if len(places) > 1:
                journal.violated(f"committed transaction {key}: {value!r} read {len(places)} times: {places[:3]}")
            if places and offset >= 0 and places != [(tp, offset)]:
                journal.violated(
                    f"committed transaction {key}: {value!r} acknowledged at {tp} {offset}, read at {places}"
                )
            # Below the log start (retention, DeleteRecords) is gone by design;
            # an offset unknown (-1) is judged only where nothing was removed.
            s0 = start.get(tp, 0)
            if not places and (offset >= s0 if offset >= 0 else s0 == 0):
                missing.append((tp.partition, value))
        if missing:
            shown = sorted({p for p, _ in missing})
            journal.violated(
                f"committed transaction {key} not visible in partitions {shown} "
                f"({len(missing)} of {len(txn.acked)} records, e.g. {missing[0][1]!r})"
            )


def hanging_transactions(cluster: ClusterView, partitions: Sequence[TopicIdPartition]) -> list[str]:
    """Partitions whose leader's LSO is below its HWM (a transaction open there)."""
    out = []
    for bid, broker in sorted(cluster.brokers.items()):
        if broker.store._closed:
            continue
        for tp in partitions:
            if not broker.replicas.is_leader(tp):
                continue
            try:
                lso, hwm = broker.store.last_stable_offset(tp), broker.store.high_watermark(tp)
            except (StoreError, KeyError):
                continue
            if lso < hwm:
                out.append(f"{tp.partition} on leader {bid}: LSO {lso} < HWM {hwm}")
    return out


def check_consume_transform_produce(
    txns: TxnLedger,
    inputs: Mapping[TopicIdPartition, Mapping[int, bytes]],
    outputs: Mapping[TopicIdPartition, Mapping[int, bytes]],
    journal: Journal,
) -> None:
    """Exactly once end to end (:mod:`simulations.dst.ctp`): every record
    committed to an input partition (``inputs``: each READ_COMMITTED read
    from its leader) appears once among the committed output records
    (``outputs``), each output names a committed input record and is of a
    committed transaction, and the outputs of one input partition are in
    its order within each output partition."""
    count: dict[tuple[int, int], int] = {}
    for otp, got in sorted(outputs.items(), key=lambda kv: kv[0].partition):
        last: dict[int, int] = {}
        for offset, value in sorted(got.items()):
            source = parse_output(value)
            txn = txns.txn_of(value)
            if source is None or txn is None or txn.outcome != "commit":
                journal.violated(f"output {otp} offset {offset}: {value!r} is no committed transformer output")
                continue
            count[source] = count.get(source, 0) + 1
            p, o = source
            if o <= last.get(p, -1):
                journal.violated(
                    f"output {otp} offset {offset}: input {p}@{o} after input {p}@{last[p]} (out of input order)"
                )
            last[p] = o
    committed = {(tp.partition, o) for tp, got in inputs.items() for o in got}
    missing = sorted(committed - count.keys())
    twice = sorted(k for k, n in count.items() if n > 1)
    stray = sorted(count.keys() - committed)
    if missing:
        journal.violated(
            f"consume-transform-produce: {len(missing)} committed input records without an output, "
            f"e.g. {', '.join(f'{p}@{o}' for p, o in missing[:5])}"
        )
    if twice:
        journal.violated(
            f"consume-transform-produce: {len(twice)} input records output more than once, "
            f"e.g. {', '.join(f'{p}@{o} x{count[(p, o)]}' for p, o in twice[:5])}"
        )
    if stray:
        journal.violated(
            f"consume-transform-produce: outputs of {len(stray)} records not committed to the input, "
            f"e.g. {', '.join(f'{p}@{o}' for p, o in stray[:5])}"
        )
