"""Consumer groups on a partlog cluster: Kafka's classic group coordinator.

As in Kafka, a group belongs to one partition of an internal topic,
``__consumer_offsets`` (``abs(java_hash(group_id)) % partitions``), and its
coordinator is that partition's leader.  Committed offsets are records in
that partition, written through the broker's own produce path with
acks=all: they are as durable and replicated as any data, and a new
coordinator (after the leader moves, or a crash) rebuilds them by reading
the partition from its log start to its high watermark before it answers.

Membership (generations, assignments) lives in memory, in the sans-IO
:class:`partlog.groups.membership.Groups`; a new coordinator starts with
none, so members learn UNKNOWN_MEMBER_ID and join again (a rebalance), which
Kafka avoids by also logging group metadata (design.md).

Records: key msgpack ``[group, topic, partition]``, value msgpack
``[offset, leader_epoch, metadata, commit_timestamp_ms]``.

Transactional offsets (TxnOffsetCommit) are the same records in a
transactional batch of the producer, with no sequence number.  They are held
*pending*, per producer id, until that producer's marker reaches the
partition: a COMMIT applies them, an ABORT drops them (Kafka's
``pendingTransactionalOffsetCommits``).  The broker tells this coordinator of
markers it leads (``add_marker_listener``); a load treats a transactional
batch and the control batch that ends it the same way.  OffsetFetch with
``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition with
pending offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from partlog.controller.cluster_meta import TopicInfo
from partlog.groups.membership import Completion, Groups, join_answer, sync_answer
from partlog.kafka.coordinator_key import java_string_hash, partition_for
from partlog.kafka.dynamic_config import GroupSettings
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch, parse_records
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.authz import OPERATIONS_NOT_ASKED
from partlog.kafka_front.consumer_group import ConsumerGroup, ConsumerGroups, HeartbeatIn, HeartbeatOut
from partlog.kafka_front.internal_log import batches, coordinator_of, ensure_internal_topic, internal_topic, read_to_end
from partlog.kafka_front.port import BrokerPort
from partlog.txn.log import TXN_STATE_TOPIC

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# Topics clients may not write, delete records of, create or delete.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_STATE_TOPIC})
# Kafka's offsets.topic.num.partitions is 50; a small cluster wants fewer.
OFFSETS_TOPIC_PARTITIONS_DEFAULT = 12
# Kafka's offsets.topic.replication.factor (fewer on a smaller cluster).
OFFSETS_TOPIC_REPLICATION_FACTOR = 3
# Kafka's offset.metadata.max.bytes.
OFFSET_METADATA_BYTES_MAX = 4096
# Groups whose committed offsets one coordinator keeps in memory.
OFFSET_GROUPS_MAX = 100_000
# Kafka's offsets.commit.timeout.ms.
OFFSETS_COMMIT_TIMEOUT_MS = 5_000
# How often the membership timer runs when nothing is due sooner.
TICK_MS_MAX = 1_000


@dataclass(frozen=True, slots=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int
    # Where in the offsets partition this commit was written: a commit
    # acknowledged later but written earlier than the one held does not
    # replace it (memory follows the log's order, as a reload would).
    log_offset: int = -1


@dataclass(slots=True)
class _Partition:
    """One offsets partition this broker leads: its groups and offsets."""

    leader_epoch: int
    groups: Groups
    offsets: dict[str, dict[tuple[str, int], Committed]]
    loaded: asyncio.Event
    # KIP-848 groups (group.protocol=consumer), beside the classic ones.
    consumers: ConsumerGroups
    # Transactional offsets not yet committed or aborted: by producer id, group.
    pending: dict[int, dict[str, dict[tuple[str, int], Committed]]] = field(default_factory=dict)
    # Markers heard while loading: (offset, producer id, committed),
    # applied after the replay.
    markers: list[tuple[int, int, bool]] = field(default_factory=list)
    # TxnOffsetCommit appends in flight, by producer id, and the markers
    # (offset, committed) heard for those producers meanwhile: a marker
    # appended after the batch but heard before its append answered ends
    # the batch's transaction (Kafka's onTxnOffsetCommitAppend finds the
    # pending entry gone).
    in_flight: dict[int, int] = field(default_factory=dict)
    heard: dict[int, list[tuple[int, bool]]] = field(default_factory=dict)


class GroupCoordinator:
    """The group coordinator of one broker (for the offsets partitions it leads)."""

    def __init__(
        self,
        broker: BrokerPort,
        *,
        offsets_partitions: int = OFFSETS_TOPIC_PARTITIONS_DEFAULT,
        initial_rebalance_delay_ms: int = 3_000,
    ) -> None:
        self.broker = broker
        self.offsets_partitions = offsets_partitions
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._parts: dict[int, _Partition] = {}
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_token = 0
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._creating: asyncio.Lock = asyncio.Lock()
        self._loads: set[asyncio.Future[None]] = set()
        # Offsets records or batches that did not decode while loading.
        self.records_skipped = 0

    def start(self) -> None:
        if self._timer is None:
            self.broker.add_marker_listener(self.on_marker)
            self._timer = asyncio.ensure_future(self._tick_loop())

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None
        for fut in self._waiting.values():
            if not fut.done():
                fut.cancel()

    # ------------------------------------------------------------ placement

    def _offsets_topic(self) -> TopicInfo | None:
        return internal_topic(self.broker, OFFSETS_TOPIC)

    async def ensure_offsets_topic(self) -> TopicInfo | None:
        """The offsets topic, created through the controller on first use
        (as Kafka creates __consumer_offsets on the first FindCoordinator)."""
        return await ensure_internal_topic(
            self.broker, OFFSETS_TOPIC, self.offsets_partitions, OFFSETS_TOPIC_REPLICATION_FACTOR, self._creating
        )

    async def find_coordinator(self, key: str) -> tuple[Errors, int]:
        """(error, broker id) of ``key``'s coordinator."""
        t = await self.ensure_offsets_topic()
        return coordinator_of(t, partition_for(key, t.num_partitions) if t is not None else 0)

    async def _partition(
        self, group_id: str, *, empty_ok: bool = False
    ) -> tuple[Errors, _Partition | None, TopicIdPartition | None]:
        """The offsets partition of ``group_id`` if this broker leads it,
        loaded; else NOT_COORDINATOR (the client looks it up again).  An
        empty group id is INVALID_GROUP_ID unless ``empty_ok``: Kafka's
        ``isValidGroupId`` accepts it for OffsetCommit, OffsetFetch and
        DescribeGroups (backward compatibility), not for membership."""
        if not group_id and not empty_ok:
            return Errors.INVALID_GROUP_ID, None, None
        t = self._offsets_topic()
        if t is None:
            return Errors.NOT_COORDINATOR, None, None
        index = partition_for(group_id, t.num_partitions)
        tp = TopicIdPartition(t.topic_id, index)
        epoch = self.broker.leader_epoch(tp)
        if epoch is None:
            old = self._parts.pop(index, None)
            if old is not None:
                self._drop(old)
            # Led here by the metadata, not yet by the replica (at start): Kafka's loading answer.
            p = self.broker.metadata.partition(tp)
            loading = p is not None and p.leader == self.broker.broker_id
            return Errors.COORDINATOR_LOAD_IN_PROGRESS if loading else Errors.NOT_COORDINATOR, None, None
        part = self._parts.get(index)
        if part is None or part.leader_epoch != epoch:
            if part is not None:
                self._drop(part)
            part = _Partition(
                epoch,
                Groups(initial_rebalance_delay_ms=self.initial_rebalance_delay_ms, new_uuid=self.broker.entropy.uuid4),
                {},
                asyncio.Event(),
                ConsumerGroups(new_uuid=self.broker.entropy.uuid4, settings=self._group_settings),
            )
            self._parts[index] = part
            self._loads.add(asyncio.ensure_future(self._load(tp, part)))
        if not part.loaded.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(OFFSETS_COMMIT_TIMEOUT_MS / 1000):
                    await part.loaded.wait()
            if not part.loaded.is_set():
                return Errors.COORDINATOR_LOAD_IN_PROGRESS, None, None
        if self._parts.get(index) is not part:
            return Errors.NOT_COORDINATOR, None, None
        return Errors.NONE, part, tp

    def _group_settings(self, group_id: str) -> GroupSettings:
        return self.broker.dynamic_configs.configs.group(group_id)  # its GROUP configs, kept by the cluster

    def _drop(self, part: _Partition) -> None:
        part.groups.drop_all()
        self._complete(part.groups.take_completions())

    async def _load(self, tp: TopicIdPartition, part: _Partition) -> None:
        """Replay the offsets partition to the log end it had when this
        broker became its leader (as Kafka's GroupMetadataManager), with
        :func:`partlog.kafka_front.internal_log.read_to_end`."""
        try:
            end = await read_to_end(self.broker, tp, lambda data, offset: self._replay(tp, part, data, offset))
        except Exception:
            log.exception("loading group offsets from %s failed; the next request tries again", tp)
            for index, p in list(self._parts.items()):
                if p is part:
                    del self._parts[index]
            part.loaded.set()
            return
        finally:
            self._loads = {t for t in self._loads if not t.done()}
        # Markers heard while loading: those below the end the load read to
        # were replayed by it; the later ones are applied now, in log order.
        for offset, producer_id, committed in sorted(part.markers):
            if offset >= end:
                self._end_pending(part, producer_id, committed)
        part.markers.clear()
        part.loaded.set()
        log.info("group offsets loaded from %s: %d groups", tp, len(part.offsets))

    def _replay(self, tp: TopicIdPartition, part: _Partition, data: bytes, offset: int) -> int:
        """Apply the whole v2 batches of ``data`` (a fetch answer from
        ``offset``); the offset after the last one.  A batch that does not
        decode (a codec this process lacks, a damaged or hostile record) is
        skipped with a log line: one bad batch must not keep every group of
        the partition from loading."""
        for header, batch in batches(data):
            try:
                records = parse_records(tp, batch, offset)
                if header.is_control:
                    for r in records:
                        if r.key is not None and len(r.key) >= 4:
                            self._end_pending(part, header.producer_id, r.key[2:4] == b"\x00\x01")
                else:
                    into = part.pending.setdefault(header.producer_id, {}) if header.is_transactional else None
                    for r in records:
                        self._apply(part, r.key, r.value, r.offset, into)
            except Exception as e:  # undecodable: skipped, as a consumer would fail on it
                self.records_skipped += 1
                log.warning("%s: batch at offset %d of %s skipped: %s", OFFSETS_TOPIC, header.base_offset, tp, e)
            offset = max(offset, header.base_offset + header.last_offset_delta + 1)
        return offset

    def _apply(
        self,
        part: _Partition,
        key: bytes | None,
        value: bytes | None,
        log_offset: int,
        into: dict[str, dict[tuple[str, int], Committed]] | None = None,
    ) -> None:
        """One offsets record into ``part`` (into a producer's pending
        offsets, ``into``, for a transactional batch); a record that does
        not decode to [group, topic, partition] -> [offset, epoch, metadata,
        ms] is skipped (counted), never raised."""
        try:
            group, topic, p = msgpack.unpackb(key) if key is not None else (None, None, None)
            if not isinstance(group, str) or not isinstance(topic, str) or type(p) is not int:
                raise ValueError("key is not [group, topic, partition]")
            held = part.offsets if into is None else into
            offsets = held.get(group)
            if offsets is None:
                if len(held) >= OFFSET_GROUPS_MAX:
                    raise ValueError(f"more than {OFFSET_GROUPS_MAX} groups with offsets")
                offsets = held[group] = {}
            if value is None:
                offsets.pop((topic, p), None)
                if not offsets:  # every offset deleted (DeleteGroups): the group is gone
                    del held[group]
                return
            offset, epoch, meta, ts = msgpack.unpackb(value)
            if not all(type(x) is int for x in (offset, epoch, ts)) or not isinstance(meta, str):
                raise ValueError("value is not [offset, leader epoch, metadata, timestamp]")
            offsets[(topic, p)] = Committed(offset, epoch, meta, ts, log_offset)
        except Exception as e:  # any hostile or damaged record: skipped
            self.records_skipped += 1
            log.warning("%s: record at %d skipped: %s", OFFSETS_TOPIC, log_offset, e)

    # ---------------------------------------------------------- membership

    def _token(self) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        self._next_token += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._next_token] = fut
        return self._next_token, fut

    def _complete(self, completions: list[Completion], *, wake: bool = True) -> None:
        """Answer the requests ``completions`` name; ``wake`` the timer when
        the call may have made a deadline sooner (a join, a leave, a sync;
        not a heartbeat, which only moves its member's deadline later)."""
        for c in completions:
            fut = self._waiting.pop(c.token, None)
            if fut is not None and not fut.done():
                fut.set_result(c.body)
        if wake:
            self._wake.set()

    async def _wait(self, part: _Partition, token: int, fut: asyncio.Future[dict[str, Any]],
                    now: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
        self._complete(part.groups.take_completions())
        if now is not None:
            self._waiting.pop(token, None)
            return now
        try:
            return await fut
        finally:
            self._waiting.pop(token, None)

    async def join(self, group_id: str, member_id: str, **kw: Any) -> dict[str, Any]:
        error, part, _ = await self._partition(group_id)
        if part is None:
            # Every field of the answer, as the Groups core builds them: a
            # missing one failed the encoding (UNKNOWN_SERVER_ERROR, and the
            # client backed off instead of finding the coordinator).
            return join_answer(error, member_id=member_id)
        if not part.consumers.forget_empty(group_id):
            # A KIP-848 group with members (Kafka 4 migrates the member in: not served).
            return join_answer(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        token, fut = self._token()
        now = part.groups.join(token, group_id, member_id, now_ms=self.broker.clock.wall_ms(), **kw)
        return await self._wait(part, token, fut, now)

    async def sync(
        self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes], instance: str | None = None
    ) -> dict[str, Any]:
        error, part, _ = await self._partition(group_id)
        if part is None:
            return sync_answer(error)
        token, fut = self._token()
        now_ms = self.broker.clock.wall_ms()
        now = part.groups.sync(token, group_id, member_id, generation, assignments, now_ms, instance)
        return await self._wait(part, token, fut, now)

    async def heartbeat(self, group_id: str, member_id: str, generation: int, instance: str | None = None) -> Errors:
        error, part, _ = await self._partition(group_id)
        if part is None:
            return error
        answer = part.groups.heartbeat(group_id, member_id, generation, self.broker.clock.wall_ms(), instance)
        self._complete(part.groups.take_completions(), wake=False)
        return answer

    async def leave(
        self, group_id: str, member_ids: list[str], instances: list[str | None] | None = None
    ) -> tuple[Errors, list[Errors]]:
        error, part, _ = await self._partition(group_id)
        if part is None:
            return error, [error] * len(member_ids)
        if part.groups.group(group_id) is None:
            # As Kafka's classicGroupLeave: no such group is the request's
            # UNKNOWN_MEMBER_ID.
            return Errors.UNKNOWN_MEMBER_ID, [Errors.UNKNOWN_MEMBER_ID] * len(member_ids)
        now = self.broker.clock.wall_ms()
        out = [part.groups.leave(group_id, m, now, i) for m, i in zip(member_ids, instances or [None] * len(member_ids),
                                                                      strict=True)]  # fmt: skip
        self._complete(part.groups.take_completions())
        return Errors.NONE, out

    async def _tick_loop(self) -> None:
        while True:
            self._wake.clear()
            now = self.broker.clock.wall_ms()
            due = [p.groups.next_deadline_ms() for p in self._parts.values()]
            due += [p.consumers.next_deadline_ms() for p in self._parts.values()]
            nearest = min((d for d in due if d is not None), default=now + TICK_MS_MAX)
            delay = max(0.0, min(nearest - now, TICK_MS_MAX) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
                    continue
            now = self.broker.clock.wall_ms()
            for p in list(self._parts.values()):
                p.groups.tick(now)
                p.consumers.tick(now)
                self._complete(p.groups.take_completions(), wake=False)
            self._wake.clear()

    async def consumer_heartbeat(
        self, req: HeartbeatIn, topics: Mapping[str, tuple[uuid.UUID, int]], version: int
    ) -> HeartbeatOut:
        """ConsumerGroupHeartbeat at this group's coordinator."""
        error, part, _ = await self._partition(req.group_id, empty_ok=True)
        if part is None:
            return HeartbeatOut(error, req.member_id)
        if req.group_id and part.groups.forget(req.group_id) != Errors.NONE:
            # A classic group with members (Kafka 4 may upgrade it online: not served).
            return HeartbeatOut(Errors.GROUP_ID_NOT_FOUND, req.member_id,
                                message=f"Group {req.group_id} is not a consumer group.")  # fmt: skip
        answer = part.consumers.heartbeat(req, topics, self.broker.clock.wall_ms(), version=version)
        self._wake.set()
        return answer

    async def consumer_group(self, group_id: str) -> tuple[Errors, ConsumerGroup | None]:
        """(error, the KIP-848 group or None) for ConsumerGroupDescribe."""
        error, part, _ = await self._partition(group_id, empty_ok=True)
        if part is None:
            return error, None
        g = part.consumers.group(group_id)
        return (Errors.NONE, g) if g is not None else (Errors.GROUP_ID_NOT_FOUND, None)

    # -------------------------------------------------------------- offsets

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        offsets: Mapping[tuple[str, int], tuple[int, int, str | None]],
        instance: str | None = None,
        api_version: int = 9,
    ) -> dict[tuple[str, int], Errors]:
        """Write ``{(topic, partition): (offset, leader_epoch, metadata)}``
        for the group; per partition the error.  A KIP-848 group checks the
        member epoch (``generation``) instead of a generation."""
        error, part, tp = await self._partition(group_id, empty_ok=True)
        if part is None or tp is None:
            return dict.fromkeys(offsets, error)
        if part.consumers.group(group_id) is not None:
            error = part.consumers.check_commit(group_id, member_id, generation, api_version=api_version)
        else:
            error = part.groups.check_commit(group_id, member_id, generation, self.broker.clock.wall_ms(), instance)
        if error != Errors.NONE:
            return dict.fromkeys(offsets, error)
        if group_id not in part.offsets and len(part.offsets) >= OFFSET_GROUPS_MAX:
            return dict.fromkeys(offsets, Errors.COORDINATOR_NOT_AVAILABLE)
        out, values, records = self._offset_records(group_id, offsets)
        if records:
            batch = build_record_batch(records)
            # Not urgent: the load-following rotation closes an idle broker's
            # file within its grace, and this PUT then counts against the
            # broker's wal_puts_per_s_max like any produce (a consumer group
            # committing often must not buy a PUT per commit).
            [result] = await self.broker.produce([(tp, batch)], acks=-1, timeout_ms=OFFSETS_COMMIT_TIMEOUT_MS)
            error = _commit_error(result.error)
            if error == Errors.NONE and (
                self._parts.get(tp.partition) is not part or self.broker.leader_epoch(tp) != part.leader_epoch
            ):
                # Leadership moved during the append: a new coordinator's
                # load may have missed it (Kafka's append would have failed
                # NOT_LEADER).  The client commits again at the new one.
                error = Errors.NOT_COORDINATOR
            if error == Errors.NONE:
                held = part.offsets.setdefault(group_id, {})
                for i, (key, c) in enumerate(values.items()):
                    at = result.base_offset + i if result.base_offset >= 0 else -1
                    old = held.get(key)
                    if old is None or at < 0 or old.log_offset < at:
                        held[key] = replace(c, log_offset=at)
            for key in values:
                out[key] = error
        return out

    def _offset_records(
        self, group_id: str, offsets: Mapping[tuple[str, int], tuple[int, int, str | None]]
    ) -> tuple[dict[tuple[str, int], Errors], dict[tuple[str, int], Committed], list[tuple[bytes, bytes, int]]]:
        """The records of an offset commit: (errors of the partitions
        refused, values of the others, their records)."""
        known = {t.name: t.num_partitions for t in self.broker.metadata.topics()}
        out: dict[tuple[str, int], Errors] = {}
        records: list[tuple[bytes, bytes, int]] = []
        values: dict[tuple[str, int], Committed] = {}
        now = self.broker.clock.wall_ms()
        for (topic, p), (offset, epoch, meta) in offsets.items():
            if not 0 <= p < known.get(topic, 0):
                out[(topic, p)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
            elif meta is not None and len(meta.encode()) > OFFSET_METADATA_BYTES_MAX:
                out[(topic, p)] = Errors.OFFSET_METADATA_TOO_LARGE
            else:
                c = Committed(offset, epoch, meta or "", now)
                values[(topic, p)] = c
                records.append(
                    (msgpack.packb([group_id, topic, p]), msgpack.packb([offset, epoch, c.metadata, now]), now)
                )
        return out, values, records

    async def fetch_offsets(
        self, group_id: str, wanted: list[tuple[str, int]] | None, require_stable: bool = False
    ) -> tuple[Errors, dict[tuple[str, int], Committed | Errors | None]]:
        """The group's committed offsets (of ``wanted``, or all); with
        ``require_stable``, UNSTABLE_OFFSET_COMMIT in place of the offset of a
        partition with transactional offsets pending (Kafka's answer)."""
        error, part, _ = await self._partition(group_id, empty_ok=True)
        if part is None:
            return error, {}
        have = part.offsets.get(group_id, {})
        out: dict[tuple[str, int], Committed | Errors | None]
        out = dict(have) if wanted is None else {k: have.get(k) for k in wanted}
        if require_stable:
            for pending in part.pending.values():
                for key in pending.get(group_id, {}):
                    if wanted is None or key in out:
                        out[key] = Errors.UNSTABLE_OFFSET_COMMIT
        return Errors.NONE, out

    # ------------------------------------------------- transactional offsets

    def on_marker(self, tp: TopicIdPartition, producer_id: int, committed: bool, offset: int) -> None:
        """The broker appended ``producer_id``'s marker to ``tp`` at
        ``offset``: when it is an offsets partition coordinated here, that
        producer's pending offsets are applied (COMMIT) or dropped (ABORT)."""
        t = self._offsets_topic()
        part = self._parts.get(tp.partition)
        if t is None or t.topic_id != tp.topic_id or part is None:
            return
        if not part.loaded.is_set():
            part.markers.append((offset, producer_id, committed))
            return
        if producer_id in part.in_flight:
            part.heard.setdefault(producer_id, []).append((offset, committed))
        self._end_pending(part, producer_id, committed)

    def _end_pending(self, part: _Partition, producer_id: int, committed: bool) -> None:
        pending = part.pending.pop(producer_id, None)
        if pending is not None and committed:
            self._apply_committed(part, pending)

    def _apply_committed(self, part: _Partition, pending: dict[str, dict[tuple[str, int], Committed]]) -> None:
        """A committed transaction's offsets become the groups' offsets."""
        for group, offsets in pending.items():
            if group not in part.offsets and len(part.offsets) >= OFFSET_GROUPS_MAX:
                self.records_skipped += 1
                log.warning("%s: offsets of group %s dropped: more than %d groups", OFFSETS_TOPIC, group,
                            OFFSET_GROUPS_MAX)  # fmt: skip
                continue
            held = part.offsets.setdefault(group, {})
            for key, c in offsets.items():
                # As Kafka: a later plain commit of the partition stands.
                old = held.get(key)
                if old is None or c.log_offset < 0 or old.log_offset < c.log_offset:
                    held[key] = c

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation: int,
        group_instance_id: str | None,
        offsets: Mapping[tuple[str, int], tuple[int, int, str | None]],
        transactional_id: str | None = None,
    ) -> dict[tuple[str, int], Errors]:
        """TxnOffsetCommit: write the offsets as a transactional batch of the
        producer (no sequence number) and hold them pending until its marker.
        With the client's ``transactional_id`` the offsets partition's leader
        verifies the transaction with its coordinator first (KIP-890 part 1:
        INVALID_TXN_STATE when the group's partition was never added)."""
        error, part, tp = await self._partition(group_id)
        if part is None or tp is None:
            return dict.fromkeys(offsets, error)
        # Kafka's validateOffsetCommit for a transactional commit: a member
        # is checked only when the request names one (v3+).
        if part.consumers.group(group_id) is not None:
            # A KIP-848 group: Kafka's validateOffsetCommit, always, a stale
            # epoch told as ILLEGAL_GENERATION (what transactional clients know).
            error = part.consumers.check_commit(group_id, member_id, generation, transactional=True)
            if error != Errors.NONE:
                return dict.fromkeys(
                    offsets, error if error != Errors.STALE_MEMBER_EPOCH else Errors.ILLEGAL_GENERATION
                )
        elif generation >= 0 or member_id or group_instance_id is not None:
            g = part.groups.group(group_id)
            if g is not None and g.fenced(group_instance_id, member_id):
                return dict.fromkeys(offsets, Errors.FENCED_INSTANCE_ID)
            if g is None or member_id not in g.members:
                return dict.fromkeys(offsets, Errors.UNKNOWN_MEMBER_ID)
            if generation != g.generation:
                return dict.fromkeys(offsets, Errors.ILLEGAL_GENERATION)
        out, values, records = self._offset_records(group_id, offsets)
        if records:
            batch = build_record_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                                       transactional=True)  # fmt: skip
            part.in_flight[producer_id] = part.in_flight.get(producer_id, 0) + 1
            try:
                [result] = await self.broker.produce(
                    [(tp, batch)],
                    acks=-1,
                    timeout_ms=OFFSETS_COMMIT_TIMEOUT_MS,
                    urgent=True,
                    transactional_id=transactional_id,
                )
            finally:
                left = part.in_flight.pop(producer_id) - 1
                heard = part.heard.get(producer_id, [])
                if left:
                    part.in_flight[producer_id] = left
                else:
                    part.heard.pop(producer_id, None)
            error = result.error if result.error in _TXN_APPEND_ERRORS else _commit_error(result.error)
            if error == Errors.NONE and (
                self._parts.get(tp.partition) is not part or self.broker.leader_epoch(tp) != part.leader_epoch
            ):
                # Leadership moved during the append: a new coordinator's
                # load may have missed the batch, so its offsets are pending
                # nowhere.  The client retries at the new coordinator.
                error = Errors.NOT_COORDINATOR
            if error == Errors.NONE:
                base = result.base_offset
                appended = {key: replace(c, log_offset=base + i if base >= 0 else -1)
                            for i, (key, c) in enumerate(values.items())}  # fmt: skip
                # The first marker of the producer after the batch ends its
                # transaction; one heard already decided it (as a load would).
                ended = [c for at, c in sorted(heard) if base < 0 or at > base][:1]
                if not ended:
                    part.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(appended)
                elif ended[0]:
                    self._apply_committed(part, {group_id: appended})
            for key in values:
                out[key] = error
        return out

    def consumer_groups_here(self) -> set[str]:
        """The KIP-848 groups among those (ListGroups v5's group type)."""
        return {g for p in self._parts.values() for g in p.consumers.groups}

    def groups_here(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group this broker coordinates."""
        out = []
        for part in self._parts.values():
            for g in part.groups.groups.values():
                out.append((g.group_id, g.protocol_type or "", g.state.value))
            for cg in part.consumers.groups.values():
                out.append((cg.group_id, "consumer", cg.state))
            for gid in part.offsets:
                if gid not in part.groups.groups and gid not in part.consumers.groups:
                    out.append((gid, part.groups.protocol_type(gid), "Empty"))
        return out

    async def describe(self, group_id: str) -> dict[str, Any]:
        error, part, _ = await self._partition(group_id, empty_ok=True)
        base: dict[str, Any] = {"group_id": group_id, "group_state": "", "protocol_type": "", "protocol_data": "",
                                "members": [], "authorized_operations": OPERATIONS_NOT_ASKED}  # fmt: skip
        if part is None:
            return {**base, "error_code": int(error)}
        g = part.groups.group(group_id)
        if g is None:
            if group_id not in part.offsets or part.consumers.group(group_id) is not None:
                # As Kafka 4 below v6: a KIP-848 group is no classic group, Dead.
                return {**base, "error_code": 0, "group_state": "Dead"}
            kept = part.groups.protocol_type(group_id)  # as Kafka: an emptied group keeps it
            return {**base, "error_code": 0, "group_state": "Empty", "protocol_type": kept}
        stable = g.state.value == "Stable"
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": dict(m.protocols).get(g.protocol or "", b"") if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            }
            for m in g.members.values()
        ]
        return {**base, "error_code": 0, "group_state": g.state.value, "protocol_type": g.protocol_type or "",
                "protocol_data": g.protocol or "", "members": members}  # fmt: skip


# Errors of a transactional offsets append the client is told as they are
# (Kafka's storeOffsets passes them through): its producer is fenced.
_TXN_APPEND_ERRORS = frozenset({Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED, Errors.INVALID_TXN_STATE,
                                Errors.TRANSACTION_COORDINATOR_FENCED})  # fmt: skip


def _commit_error(e: Errors) -> Errors:
    """Kafka's translation of the offsets topic's append error for an
    OffsetCommit answer (GroupMetadataManager.storeOffsets)."""
    if e == Errors.NONE:
        return e
    if e in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_ENOUGH_REPLICAS,
             Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.REQUEST_TIMED_OUT) or e >= 10_000:  # fmt: skip
        return Errors.COORDINATOR_NOT_AVAILABLE
    if e == Errors.NOT_LEADER_OR_FOLLOWER:
        return Errors.NOT_COORDINATOR
    if e in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE):
        return Errors.INVALID_COMMIT_OFFSET_SIZE
    return Errors.UNKNOWN_SERVER_ERROR


__all__ = ["INTERNAL_TOPICS", "OFFSETS_TOPIC", "Committed", "GroupCoordinator", "java_string_hash", "partition_for"]
