"""The direct transactions on etcd, one part of
:class:`~partlog.controller.etcd_meta.EtcdMetadata`: what needs no single
actor, so the process that needs it writes it with a compare-and-swap.

* AlterPartition: compare the partition's revision and the sender's broker
  epoch (and every added replica's);
* producer-id blocks: compare-and-swap on a counter, KIP-730's scheme;
* topic creation, growth (CreatePartitions) and deletion;
* topic config overrides: compare-and-swap on the topic's configs key;
* reassignments (:mod:`partlog.controller.reassignment`): compare-and-swap
  per partition, as AlterPartition; an AlterPartition whose ISR takes in
  the whole target completes the reassignment in its own transaction.

Calls that need the quorum answer retriable errors
(``COORDINATOR_NOT_AVAILABLE``, ``REQUEST_TIMED_OUT``) when etcd cannot be
reached: the caller retries.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import aetcd.exceptions
import aetcd.utils

from partlog.controller.cluster_meta import (
    NO_LEADER,
    ConfigChange,
    MetadataError,
    PartitionInfo,
    TopicInfo,
    check_alter_partition,
)
from partlog.controller.etcd_batch import TXN_OP_OVERHEAD_BYTES, TXN_OPS_MAX, TXN_REQUEST_BYTES_MAX
from partlog.controller.etcd_connection import ETCD_ERRORS, EtcdConnection, put_revision
from partlog.controller.etcd_layout import (
    EtcdView,
    Keys,
    dec_counter,
    enc_part,
    enc_topic,
    enc_topic_configs,
    pack_value,
)
from partlog.controller.etcd_session import EtcdSession
from partlog.controller.model import DELETED_TOPICS_MAX, REASON_ALTER_PARTITION
from partlog.controller.partition_admin import NewPartitions
from partlog.controller.reassignment import REASON_REASSIGNMENT, completed, decide_reassignment
from partlog.controller.rules import (
    Refused,
    added_partitions,
    alter_overrides,
    bump,
)
from partlog.controller.topic_create import Assignment, CreateState, NewTopic, PlannedTopic, plan_topic, plan_topics
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import PRODUCER_ID_MAX, ProducerIdBlock
from partlog.kafka.records import TopicIdPartition

__all__ = ["EtcdAdmin"]

log = logging.getLogger(__name__)

# Compare-and-swap attempts on the producer-id counter (and on a topic's
# configs) before answering a retriable error (each loses only to another
# process's success).
PRODUCER_ID_CAS_ATTEMPTS_MAX = 32
CONFIG_CAS_ATTEMPTS_MAX = 32
# Compare-and-swap attempts of one CreatePartitions on its topic's key (each
# loses only to another change of that topic), and of one partition's
# reassignment on its partition key (each loses to an ISR change or an election).
TOPIC_CAS_ATTEMPTS_MAX = 8
PARTITION_CAS_ATTEMPTS_MAX = 8


def _fresh_counter(value: bytes, revision: int, floor: int) -> tuple[int, int]:
    """The producer-id counter as etcd answered a read issued when ``floor``
    was known (linearizable, so at least as new): below it, the counter went
    back (a restore, a hostile writer) and blocks would be handed out twice."""
    first = dec_counter(value, "producer_ids")
    if first < floor:
        raise MetadataError(f"producer_ids is {first}, below {floor} already handed out")
    return first, revision


class EtcdAdmin:
    """The transactions of one metadata source over ``view``; a broker's
    (with ``session``) also changes ISRs and takes producer-id blocks.
    ``schedule_adopt`` asks the source to adopt the view's changes,
    ``view_until`` waits until its adopted view satisfies a condition, and
    ``failed`` counts and logs a call that got no usable answer."""

    def __init__(
        self,
        conn: EtcdConnection,
        keys: Keys,
        view: EtcdView,
        session: EtcdSession | None,
        *,
        producer_id_block_size: int,
        failed: Callable[[str, BaseException], None],
        schedule_adopt: Callable[[], None],
        view_until: Callable[[Callable[[], bool]], Awaitable[None]],
        new_uuid: Callable[[], uuid.UUID],
    ) -> None:
        self._new_uuid = new_uuid  # topic ids
        self.conn = conn
        self.keys = keys
        self.view = view
        self.session = session
        self.producer_id_block_size = producer_id_block_size
        self._failed = failed
        self._schedule_adopt = schedule_adopt
        self._view_until = view_until
        self._pid_lock = asyncio.Lock()
        self._pid_seen: tuple[int, int] | None = None
        # The counter after the last block this process was handed.
        self._pid_floor = 0

    # -------------------------------------------------------- AlterPartition

    async def alter_partition(
        self, broker_id: int, tp: TopicIdPartition, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
    ) -> PartitionInfo | Errors:
        """Kafka's AlterPartition as one transaction: it commits only if the
        partition is still the one checked and the sender still holds its
        broker epoch (and every added replica its own).  Errors as the
        embedded controller's; COORDINATOR_NOT_AVAILABLE / REQUEST_TIMED_OUT
        (retriable) when etcd cannot be reached or between registrations."""
        session = self.session
        if session is None or broker_id != session.broker.broker_id:
            return Errors.BROKER_ID_NOT_REGISTERED
        epoch = session.broker_epoch
        if epoch < 0 or self.view.frozen:
            return Errors.COORDINATOR_NOT_AVAILABLE
        me = self.view.brokers.get(broker_id)
        if me is not None and me.epoch != epoch and self.view.revision >= epoch:
            session.incarnation_gone(epoch)
            return Errors.STALE_BROKER_EPOCH
        p = self.view.partition(tp)
        asked = list(isr)
        err = check_alter_partition(p, broker_id, leader_epoch, partition_epoch, asked)
        if err != Errors.NONE:
            return err
        assert p is not None
        added = sorted(set(asked) - set(p.isr))
        if not all(self.view.accepted(r) for r in added):
            return Errors.INELIGIBLE_REPLICA
        new = bump(p, completed(replace(p, isr=tuple(r for r in p.replicas if r in set(asked))), self.view.accepted))
        if new == p:
            return p
        if new.leader != p.leader and new.leader != NO_LEADER:
            # A completed reassignment moved the leadership: its incarnation is compared too.
            added = sorted({*added, new.leader})
        # Every revision compared is read with ``p``, before any await: one
        # read after it could be newer than the state ``new`` was built on.
        owner = self.view.topic_revision(tp.topic_id)
        assert owner is not None  # the partition is known
        part_rev = self.view.part_revision(tp)
        added_epochs = [(r, self.view.brokers[r].epoch) for r in added]
        try:
            c = await self.conn.client()
            t = c.transactions
            compare = [
                t.mod(self.keys.part(tp)) == part_rev,
                t.create(self.keys.topic(owner[0])) == owner[1],
                t.mod(self.keys.broker(broker_id)) == epoch,
            ]
            compare += [t.mod(self.keys.broker(r)) == e for r, e in added_epochs]
            # A lost compare answers what changed, to give Kafka's error.
            failure = [t.get(self.keys.broker(broker_id)), t.get(self.keys.topic(owner[0]))]
            failure += [t.get(self.keys.broker(r)) for r, _ in added_epochs]
            ok, resp = await self.conn.txn(compare, [t.put(self.keys.part(tp), enc_part(new))], failure)
        except (aetcd.exceptions.ConnectionTimeoutError, TimeoutError):
            return Errors.REQUEST_TIMED_OUT
        except ETCD_ERRORS as e:
            self._failed("alter_partition", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        if ok:
            self.view.set_partition(tp, new, put_revision(resp))
            self._schedule_adopt()
            log.info("etcd: %s/%d isr %s -> %s (%s)", owner[0], tp.partition, list(p.isr), list(new.isr),
                     REASON_ALTER_PARTITION)  # fmt: skip
            # Kafka's answer when the ISR completed a reassignment that moved the leadership.
            return new if new.leader == broker_id else Errors.NEW_LEADER_ELECTED

        def got(i: int) -> Any:
            return resp[i][0][1] if len(resp) > i and resp[i] else None

        mine = got(0)
        if mine is None or mine.mod_revision != epoch:
            session.incarnation_gone(epoch)
            return Errors.STALE_BROKER_EPOCH if mine is not None else Errors.BROKER_ID_NOT_REGISTERED
        topic = got(1)
        if topic is None or topic.create_revision != owner[1]:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION  # deleted (or re-created) meanwhile
        if any((b := got(2 + i)) is None or b.mod_revision != e for i, (_, e) in enumerate(added_epochs)):
            return Errors.INELIGIBLE_REPLICA  # an added replica's incarnation ended meanwhile
        # The partition changed under us: the leader retries with what the
        # view brings (Kafka's answer to a stale partition epoch).
        return Errors.INVALID_UPDATE_VERSION

    # ----------------------------------------------------------- producer ids

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock | Errors:
        """The next block of producer ids, by compare-and-swap on
        ``producer_ids`` (KIP-730's scheme): the block is durable in etcd
        before it is returned, and no id is handed out twice.  Retriable
        COORDINATOR_NOT_AVAILABLE when etcd cannot be reached, this broker
        is between registrations, or the counter key is unreadable (never
        guessed over)."""
        session = self.session
        if session is None or broker_id != session.broker.broker_id or session.broker_epoch < 0:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if self.view.frozen:
            return Errors.COORDINATOR_NOT_AVAILABLE
        epoch = session.broker_epoch
        size = self.producer_id_block_size
        # One CAS at a time per process: its own requests would only make
        # each other retry.
        async with self._pid_lock:
            try:
                c = await self.conn.client()
                t = c.transactions
                seen = self._pid_seen  # (counter, its mod revision) as this process last wrote it
                if seen is None or seen[0] < self.view.producer_ids_next:
                    # Unknown, or another broker allocated since: read it.
                    floor = self._pid_floor_now()
                    got = await c.get(self.keys.producer_ids)
                    if got is None:
                        # Made with the cluster id: missing, it was deleted.
                        raise MetadataError("producer_ids is missing (it is made with the cluster): not starting at 0")
                    seen = _fresh_counter(got.value, got.mod_revision, floor)
                for _ in range(PRODUCER_ID_CAS_ATTEMPTS_MAX):
                    first, rev = seen
                    if first > PRODUCER_ID_MAX - size + 1:
                        log.error("etcd: producer ids exhausted at %d", first)
                        return Errors.UNKNOWN_SERVER_ERROR
                    floor = self._pid_floor_now()
                    ok, resp = await self.conn.txn(
                        [t.mod(self.keys.producer_ids) == rev, t.mod(self.keys.broker(broker_id)) == epoch],
                        [t.put(self.keys.producer_ids, pack_value(first + size))],
                        # A lost race answers what won it: the next attempt
                        # needs no read of its own.
                        [t.get(self.keys.broker(broker_id)), t.get(self.keys.producer_ids)],
                    )
                    if ok:
                        self._pid_seen = (first + size, put_revision(resp))
                        self._pid_floor = first + size
                        return ProducerIdBlock(broker_id, first, size)
                    mine = resp[0][0][1] if resp and resp[0] else None
                    if mine is None or mine.mod_revision != epoch:
                        session.incarnation_gone(epoch)
                        return Errors.COORDINATOR_NOT_AVAILABLE
                    counter = resp[1][0] if len(resp) > 1 and resp[1] else None
                    if counter is None:
                        # We lost to a writer, yet there is no counter: it was
                        # deleted.  Starting over at 0 would hand ids out twice.
                        raise MetadataError("producer_ids deleted after blocks were handed out: not restarting at 0")
                    seen = _fresh_counter(counter[0], counter[1].mod_revision, floor)
                self._pid_seen = None
            except ValueError as e:  # MetadataError: an unreadable counter
                self._pid_seen = None
                log.error("etcd %s: producer_ids: %s", self.conn.target.url(), e)
                return Errors.COORDINATOR_NOT_AVAILABLE
            except ETCD_ERRORS as e:
                self._pid_seen = None
                self._failed("allocate_producer_ids", e)
                return Errors.COORDINATOR_NOT_AVAILABLE
        return Errors.COORDINATOR_NOT_AVAILABLE

    def _pid_floor_now(self) -> int:
        """What a read of the counter issued now must not be below: what
        this process was handed and what its view has applied."""
        return max(self.view.producer_ids_next, self._pid_floor)

    # ---------------------------------------------------------------- topics

    async def create_topic(
        self,
        name: str,
        partitions: int,
        rf: int,
        cluster_id: uuid.UUID | None,
        configs: Mapping[str, str] | None = None,
        assignments: tuple[Assignment, ...] | None = None,
    ) -> TopicInfo | Errors | Refused:
        """Create one topic by one transaction that succeeds only if the name
        is free and the prefix still holds ``cluster_id``; the same shape
        again answers the existing topic.  Decided as the embedded
        controller decides (:func:`~partlog.controller.topic_create.plan_topic`):
        replicas over the brokers the acting controller has accepted, or as
        ``assignments`` say (registered: a broker with a registration key;
        active: accepted).  A new partition starts led by its first replica
        with ISR = replicas (etcd keeps the replicas alone until a change);
        the acting controller moves a fenced one's leadership as it does any."""
        if self.view.frozen:
            return Errors.COORDINATOR_NOT_AVAILABLE
        alive = [b.info for bid, b in sorted(self.view.brokers.items()) if self.view.accepted(bid)]
        state = CreateState(alive, self.view.brokers.__contains__, self.view.partition_count(), self._held)
        plan = plan_topic(NewTopic(name, partitions, rf, configs, assignments), state)
        if not isinstance(plan, PlannedTopic):
            return plan
        overrides = plan.overrides
        shape = (len(plan.parts), len(plan.parts[0].replicas))
        tid = self._new_uuid()
        replicas = [p.replicas for p in plan.parts]
        try:
            c = await self.conn.client()
            t = c.transactions
            ok, _ = await self.conn.txn(
                [t.create(self.keys.topic(name)) == 0, t.value(self.keys.cluster_id) == str(cluster_id).encode()],
                [
                    t.put(self.keys.topic(name), enc_topic(tid, replicas)),
                    *([] if overrides is None else [t.put(self.keys.topic_configs(tid), enc_topic_configs(overrides))]),
                ],
            )
            if not ok:
                # Someone else created it (or the cluster id moved): read it.
                await self._view_until(lambda: self.view.topic_of(name) is not None)
                existing = self._same_shape(name, *shape)
                return existing if existing is not None else Errors.TOPIC_ALREADY_EXISTS
        except (aetcd.exceptions.ConnectionTimeoutError, TimeoutError):
            return Errors.REQUEST_TIMED_OUT
        except ETCD_ERRORS as e:
            self._failed("create_topics", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        parts = tuple(PartitionInfo(r[0], 0, r, r, 0) for r in replicas)
        return TopicInfo(tid, name, parts, overrides)

    async def create_topics(
        self, topics: Sequence[NewTopic], cluster_id: uuid.UUID | None
    ) -> dict[str, TopicInfo | Errors | Refused]:
        """Create a CreateTopics request's topics: decided together
        (:func:`~partlog.controller.topic_create.plan_topics`, as the embedded
        controller) and written in as few transactions as etcd takes
        (``TXN_OPS_MAX`` compares and puts, ``TXN_REQUEST_BYTES_MAX`` bytes):
        one raft round, one revision and one view update per transaction
        rather than per topic.  Each transaction puts its topics only if
        every name is free and the prefix still holds ``cluster_id``; when
        one fails (a name taken meanwhile), its topics go one by one
        (:meth:`create_topic`), so each gets its own answer."""
        if self.view.frozen:
            return dict.fromkeys((t.name for t in topics), Errors.COORDINATOR_NOT_AVAILABLE)
        alive = [b.info for bid, b in sorted(self.view.brokers.items()) if self.view.accepted(bid)]
        state = CreateState(alive, self.view.brokers.__contains__, self.view.partition_count(), self._held)
        out = plan_topics(topics, state, self._new_uuid, lambda _tid: False)
        new = [a for a in out.values() if isinstance(a, TopicInfo) and self.view.topic_of(a.name) is None]
        by_name = {t.name: t for t in topics}
        chunk: list[TopicInfo] = []
        ops, size = 1, 0  # the cluster id's compare
        for info in new:
            puts = self._topic_puts(info)
            cost = 1 + len(puts)  # its name's compare and its puts
            more = sum(len(k) + len(v) + TXN_OP_OVERHEAD_BYTES for k, v in puts)
            if chunk and (ops + cost > TXN_OPS_MAX or size + more > TXN_REQUEST_BYTES_MAX):
                out.update(await self._put_topics(chunk, by_name, cluster_id))
                chunk, ops, size = [], 1, 0
            chunk.append(info)
            ops, size = ops + cost, size + more
        if chunk:
            out.update(await self._put_topics(chunk, by_name, cluster_id))
        return out

    def _topic_puts(self, info: TopicInfo) -> list[tuple[bytes, bytes]]:
        puts = [(self.keys.topic(info.name), enc_topic(info.topic_id, [p.replicas for p in info.partitions]))]
        if info.configs is not None:
            puts.append((self.keys.topic_configs(info.topic_id), enc_topic_configs(info.configs)))
        return puts

    async def _put_topics(
        self, chunk: list[TopicInfo], asked: Mapping[str, NewTopic], cluster_id: uuid.UUID | None
    ) -> dict[str, TopicInfo | Errors | Refused]:
        """One transaction creating ``chunk``; topic by topic when it fails."""
        try:
            c = await self.conn.client()
            t = c.transactions
            ok, _ = await self.conn.txn(
                [
                    *(t.create(self.keys.topic(info.name)) == 0 for info in chunk),
                    t.value(self.keys.cluster_id) == str(cluster_id).encode(),
                ],
                [t.put(k, v) for info in chunk for k, v in self._topic_puts(info)],
            )
        except (aetcd.exceptions.ConnectionTimeoutError, TimeoutError):
            return dict.fromkeys((info.name for info in chunk), Errors.REQUEST_TIMED_OUT)
        except ETCD_ERRORS as e:
            self._failed("create_topics", e)
            return dict.fromkeys((info.name for info in chunk), Errors.COORDINATOR_NOT_AVAILABLE)
        if ok:
            return {info.name: info for info in chunk}
        out: dict[str, TopicInfo | Errors | Refused] = {}
        for info in chunk:
            n = asked[info.name]
            out[info.name] = await self.create_topic(
                n.name, n.partitions, n.replication_factor, cluster_id, n.configs, n.assignments
            )
        return out

    async def create_partitions(
        self, name: str, asked: NewPartitions, validate_only: bool, cluster_id: uuid.UUID | None
    ) -> TopicInfo | Refused:
        """Grow a topic by one transaction that rewrites its key with the
        same id and the added partitions' replicas (decided by
        :func:`~partlog.controller.rules.added_partitions` over the brokers
        the acting controller has accepted); it succeeds only if the key is
        unchanged since the view read it and the prefix still holds
        ``cluster_id``.  A lost compare decides again on the newer view.

        The new partitions are as created (first replica leads, ISR =
        replicas): a manual assignment naming a broker that is not alive
        is fixed by the acting controller's next pass, as for a new topic
        whose broker died meanwhile (the embedded controller starts them
        with the alive ISR at once)."""
        for _ in range(TOPIC_CAS_ATTEMPTS_MAX):
            if self.view.frozen:
                return Refused(Errors.COORDINATOR_NOT_AVAILABLE, "this process's view of etcd is frozen")
            t = self._topic_now(name)
            modified = self.view.topic_modified(name)
            if t is None or modified is None:
                return Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
            alive = [b.info for bid, b in sorted(self.view.brokers.items()) if self.view.accepted(bid)]
            new = added_partitions(name, t.partitions, asked.count, asked.assignments, alive_brokers=alive,
                                   registered=self.view.brokers.__contains__,
                                   cluster_partitions=self.view.partition_count())  # fmt: skip
            if isinstance(new, Refused) or validate_only:
                return new if isinstance(new, Refused) else replace(t, partitions=(*t.partitions, *new))
            # The key keeps the existing partitions' replicas as it holds them
            # (a reassigned partition's own are in its partition key).
            replicas = [*(self.view.created_replicas(name) or ()), *(p.replicas for p in new)]
            try:
                c = await self.conn.client()
                tx = c.transactions
                key = self.keys.topic(name)
                ok, _ = await self.conn.txn(
                    [tx.mod(key) == modified, tx.value(self.keys.cluster_id) == str(cluster_id).encode()],
                    [tx.put(key, enc_topic(t.topic_id, replicas))],
                )
            except (aetcd.exceptions.ConnectionTimeoutError, TimeoutError):
                return Refused(Errors.REQUEST_TIMED_OUT, "etcd did not answer in time: the partitions may be added")
            except ETCD_ERRORS as e:
                self._failed("create_partitions", e)
                return Refused(Errors.COORDINATOR_NOT_AVAILABLE, "etcd cannot be reached")
            if ok:
                log.info("etcd: topic %s grown to %d partitions", name, asked.count)
                return replace(t, partitions=(*t.partitions, *new))
            # Changed meanwhile (grown, deleted, re-created): decide again on the newer view.
            moved = self._topic_moved(name, modified)
            await self._view_until(moved)
            if not moved():  # the cluster id, not the topic (or a view that stopped following)
                return Refused(Errors.COORDINATOR_NOT_AVAILABLE, "etcd holds another cluster or is not followed")
        return Refused(Errors.COORDINATOR_NOT_AVAILABLE, "the topic kept changing: retry")

    async def alter_reassignment(
        self, name: str, index: int, target: tuple[int, ...] | None, *, unclean: bool
    ) -> Refused | None:
        """One partition of AlterPartitionReassignments as
        :func:`~partlog.controller.reassignment.decide_reassignment` decides it
        over the brokers the acting controller accepted, written by one
        transaction that succeeds only if the partition key, the topic and
        the prefix's cluster id are as the view read them (and a new
        leader's incarnation).  A lost compare decides again on the newer view."""
        for _ in range(PARTITION_CAS_ATTEMPTS_MAX):
            if self.view.frozen:
                return Refused(Errors.COORDINATOR_NOT_AVAILABLE, "this process's view of etcd is frozen")
            got = self.view.topic_of(name)
            tp = TopicIdPartition(got[0], index) if got is not None else None
            p = None if tp is None else self.view.partition(tp)
            decided = decide_reassignment(name, index, target, p, topic_known=got is not None,
                                          registered=self.view.brokers.__contains__, alive=self.view.accepted,
                                          unclean=unclean)  # fmt: skip
            if isinstance(decided, Refused):
                return decided
            assert got is not None and tp is not None and p is not None
            new = bump(p, decided)
            if new == p:
                return None
            part_rev = self.view.part_revision(tp)
            leader = self.view.brokers.get(new.leader) if new.leader != p.leader else None
            try:
                c = await self.conn.client()
                t = c.transactions
                compare = [
                    t.mod(self.keys.part(tp)) == part_rev,
                    t.create(self.keys.topic(name)) == got[1],
                    t.value(self.keys.cluster_id) == str(self.view.cluster_id).encode(),
                ]
                if leader is not None:
                    compare.append(t.mod(self.keys.broker(new.leader)) == leader.epoch)
                ok, resp = await self.conn.txn(compare, [t.put(self.keys.part(tp), enc_part(new))])
            except (aetcd.exceptions.ConnectionTimeoutError, TimeoutError):
                return Refused(Errors.REQUEST_TIMED_OUT, "etcd did not answer in time: the reassignment may be done")
            except ETCD_ERRORS as e:
                self._failed("alter_reassignments", e)
                return Refused(Errors.COORDINATOR_NOT_AVAILABLE, "etcd cannot be reached")
            if ok:
                self.view.set_partition(tp, new, put_revision(resp))
                self._schedule_adopt()
                log.info("etcd: %s/%d replicas %s -> %s adding %s removing %s (%s)", name, index, list(p.replicas),
                         list(new.replicas), list(new.adding), list(new.removing), REASON_REASSIGNMENT)  # fmt: skip
                return None
            moved = self._part_moved(tp, part_rev, new.leader if leader is not None else None)
            await self._view_until(moved)
            if not moved():
                return Refused(Errors.COORDINATOR_NOT_AVAILABLE, "etcd holds another cluster or is not followed")
        return Refused(Errors.COORDINATOR_NOT_AVAILABLE, "the partition kept changing: retry")

    def _part_moved(self, tp: TopicIdPartition, part_rev: int, leader: int | None) -> Callable[[], bool]:
        """Whether the view moved past what a lost compare was decided on:
        the partition, its topic, or the new ``leader``'s incarnation."""
        topic = self.view.topic_revision(tp.topic_id)
        seen = None if leader is None else self.view.brokers.get(leader)
        return lambda: (
            self.view.part_revision(tp) != part_rev
            or self.view.topic_revision(tp.topic_id) != topic
            or (leader is not None and self.view.brokers.get(leader) != seen)
        )

    def _topic_moved(self, name: str, modified: int) -> Callable[[], bool]:
        return lambda: self.view.topic_modified(name) != modified

    def _held(self, name: str) -> TopicInfo | None:
        """The topic ``name`` as the view holds it; the snapshot is read
        only for a name the view has (a retried create)."""
        return self._topic_now(name) if self.view.topic_of(name) is not None else None

    def _topic_now(self, name: str) -> TopicInfo | None:
        return next((x for x in self.view.snapshot().topics if x.name == name), None)

    def _same_shape(self, name: str, partitions: int, rf: int) -> TopicInfo | Errors | None:
        got = self.view.topic_of(name)
        if got is None:
            return None
        info = self.view.snapshot()
        t = next((x for x in info.topics if x.name == name), None)
        if t is not None and t.num_partitions == partitions and len(t.partitions[0].replicas) == rf:
            return t
        return Errors.TOPIC_ALREADY_EXISTS

    async def delete_topic(self, name: str) -> uuid.UUID | Errors:
        """Delete a topic by one transaction (the topic key, its partitions,
        and the deleted record, kept for good); its id, or the error."""
        got = self.view.topic_of(name)
        if self.view.frozen:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if got is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        if len(self.view.deleted) >= DELETED_TOPICS_MAX:
            return Errors.POLICY_VIOLATION
        tid, rev = got
        try:
            c = await self.conn.client()
            t = c.transactions
            parts = self.keys.parts_of(tid)
            ok, _ = await self.conn.txn(
                [t.create(self.keys.topic(name)) == rev],
                [
                    t.delete(self.keys.topic(name)),
                    t.delete(parts, range_end=aetcd.utils.prefix_range_end(parts)),
                    t.delete(self.keys.topic_configs(tid)),
                    t.put(self.keys.deleted_topic(tid), pack_value(name)),
                ],
            )
        except ETCD_ERRORS as e:
            self._failed("delete_topics", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        return tid if ok else Errors.UNKNOWN_TOPIC_OR_PARTITION

    async def alter_topic_configs(
        self, name: str, change: ConfigChange, validate_only: bool
    ) -> tuple[Errors, str | None, tuple[tuple[str, str], ...] | None]:
        """One topic's overrides after ``change`` (see
        :meth:`Controller.alter_topic_configs`), by compare-and-swap on its
        configs key while the topic lives: (error, message, the overrides
        written, None when nothing was)."""
        for _ in range(CONFIG_CAS_ATTEMPTS_MAX):
            if self.view.frozen:
                return Errors.COORDINATOR_NOT_AVAILABLE, None, None
            got = self.view.topic_of(name)
            current, cfg_rev = self.view.configs_of(got[0]) if got is not None else (None, 0)
            err, why, new = alter_overrides(current, change)
            if err == Errors.NONE and got is None:
                err = Errors.UNKNOWN_TOPIC_OR_PARTITION
            if err != Errors.NONE or got is None or validate_only or new == current:
                return err, why, None
            tid, rev = got
            key = self.keys.topic_configs(tid)
            try:
                c = await self.conn.client()
                t = c.transactions
                compare = [t.create(self.keys.topic(name)) == rev, t.mod(key) == cfg_rev]
                ok, _ = await self.conn.txn(compare, [t.put(key, enc_topic_configs(new))])
            except (aetcd.exceptions.ConnectionTimeoutError, TimeoutError):
                return Errors.REQUEST_TIMED_OUT, None, None
            except ETCD_ERRORS as e:
                self._failed("alter_topic_configs", e)
                return Errors.COORDINATOR_NOT_AVAILABLE, None, None
            if ok:
                return Errors.NONE, None, new
            # Another change won: decide again on what the view brings.
            await self._view_until(self._moved(name, got, cfg_rev))
        return Errors.COORDINATOR_NOT_AVAILABLE, None, None

    def _moved(self, name: str, topic: tuple[uuid.UUID, int], cfg_rev: int) -> Callable[[], bool]:
        """Whether the view moved past the topic and configs revision a lost
        compare-and-swap was decided on."""
        return lambda: self.view.topic_of(name) != topic or self.view.configs_of(topic[0])[1] != cfg_rev
