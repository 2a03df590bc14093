"""The embedded controller: cluster metadata as KRaft's controller
keeps it, simplified to one process, persisted in LMDB.

It owns brokers (AZ, address, broker epoch, fenced or not), topics and their
partitions (replicas, leader, leader epoch, ISR, partition epoch) and the
producer-id blocks (KIP-730).  Every method takes the current time as a
value; nothing here reads a clock, starts a thread or touches a socket, so
the asyncio shell (:mod:`partlog.controller.server`), the tests and the
simulations drive the same object.

Durability: every state change is validated and staged first (``_Draft``),
then written in ONE LMDB write transaction (``sync=True``: fsynced) together
with the bumped ``version`` by :class:`~partlog.controller.state_store.ControllerStateStore`,
and only then applied to memory and returned.  A failed write
leaves memory as it was, so nothing that was not durable is ever answered or
published.

Rules (Kafka's KRaft semantics, simplified):

* **Brokers.**  ``register_broker`` starts a new incarnation with a fresh
  broker epoch (a controller-wide counter, never reused).  A broker that was
  still alive under an older epoch restarted faster than its session timeout:
  the old incarnation is fenced first, exactly as if it had timed out (it lost
  its in-memory state).  ``heartbeat`` keeps an incarnation alive; ``tick``
  fences those silent for longer than ``broker_session_timeout_ms``.  A
  fenced broker must register again (``BROKER_ID_NOT_REGISTERED``).
* **Fencing, ELR** (:mod:`partlog.controller.elr`, KIP-966).  The fenced
  broker leaves every ISR, for the ELR when the ISR falls below min ISR.
  Partitions it led elect the first alive ISR member, else ELR member;
  with none they are offline (``NO_LEADER``), unless unclean leader election
  is on.  A registration after an unclean shutdown leaves every ISR and ELR.
* **Offline partitions** are re-elected whenever brokers register (an ELR
  member coming back leads again) and on every tick (unclean election).
* **Epochs.**  Every leader change (including to and from ``NO_LEADER``)
  bumps ``leader_epoch`` and ``partition_epoch``; every ISR change bumps
  ``partition_epoch``.
* **Preferred leaders.**  Every ``leader_imbalance_check_interval_ms`` a
  partition whose first replica is alive, in the ISR and not leading gets it
  back as leader (Kafka also waits for a 10% per-broker imbalance; we do not).
* **AlterPartition** is validated as Kafka's controller does (see
  :meth:`Controller.alter_partition`).
* **Reassignments** (:mod:`partlog.controller.reassignment`): every staged
  partition change completes one whose target is in the ISR (``_Draft.set_part``).
* **Producer ids**: :class:`partlog.controller.producer_ids.ProducerIdManager`
  (``data_dir/producer_ids``), a block durable before it is returned; not a
  metadata change (``version`` stays).

Identity: a new state directory gets a random cluster id
(``ControllerConfig.cluster_id`` to choose it), kept with the state and
never changed; topic ids are random UUIDs (Kafka's rule), so a topic that is
deleted and created again, or one of the same name in another cluster, never
matches old references.  Randomness is passed in (``new_uuid``).

Restart: reopening ``data_dir`` restores everything.  Brokers that were not
fenced are restored as registered but not yet heard from: they get one full
session timeout from the controller's start before they are fenced, as KRaft
gives brokers after a controller failover.

Where the rest is: the types and events in :mod:`partlog.controller.model`,
the rules shared with the etcd back end (topic names, replica assignment,
elections) in :mod:`partlog.controller.rules`, the state directory and its
layout in :mod:`partlog.controller.state_store`, the RPC bodies in
:mod:`partlog.controller.wire`.
"""

from __future__ import annotations

import os
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from partlog.controller import elr
from partlog.controller.cluster_meta import (
    NO_LEADER,
    ConfigChange,
    PartitionInfo,
    TopicInfo,
    check_alter_partition,
    kafka_listener_ports,
)
from partlog.controller.draft import Draft as _Draft
from partlog.controller.model import (
    DELETED_TOPICS_MAX,
    FENCED_NEW_INCARNATION,
    FENCED_SESSION_TIMEOUT,
    REASON_ALTER_PARTITION,
    REASON_BROKER_REGISTERED,
    REASON_OFFLINE,
    BrokerRegistered,
    BrokerRegistration,
    ControllerConfig,
    ControllerEvent,
    MetadataSnapshot,
    TopicDeleted,
)
from partlog.controller.producer_ids import ProducerIdManager, ProducerIdsExhaustedError
from partlog.controller.reassignment import REASON_REASSIGNMENT, decide_reassignment, state_error
from partlog.controller.rules import (
    Overrides,
    Refused,
    added_partitions,
    alter_overrides,
    check_broker_args,
)
from partlog.controller.scram_store import ScramStore
from partlog.controller.state_store import ControllerStateError, ControllerStateStore
from partlog.controller.topic_create import CreateState, NewTopic, plan_topics
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import ProducerIdBlock
from partlog.kafka.records import TopicIdPartition
from partlog.limits import BROKERS_MAX, PORT_MAX
from partlog.runtime import SYSTEM_ENTROPY

__all__ = ["Controller", "ControllerConfig"]

# Events wait here until the shell takes them (it logs them); a core driven
# without a shell must not grow without bound.
EVENTS_MAX = 10_000


class Controller:
    """The controller's state machine, each change made durable by its
    :class:`ControllerStateStore` before it is applied.  See the module doc
    for the rules.  Not thread-safe: one caller at a time (the shell holds a lock).

    Remote input reaches these methods already decoded; values a remote can
    get wrong are answered with an :class:`Errors` code, argument types and
    ranges the shell checks are asserted (``ValueError`` here is a bug in the
    caller).  ``OSError``/``lmdb.Error`` from the disk propagate; the change
    that failed was then neither applied nor answered.
    """

    def __init__(
        self, config: ControllerConfig, *, now_ms: int, new_uuid: Callable[[], uuid.UUID] | None = None
    ) -> None:
        self.config = config
        # Handed in (the server passes its Entropy's uuid4): the simulation's
        # is seeded.
        self._new_uuid = new_uuid if new_uuid is not None else SYSTEM_ENTROPY.uuid4
        self._store = ControllerStateStore(config.data_dir)
        try:
            self._pids = ProducerIdManager(
                os.path.join(os.fspath(config.data_dir), "producer_ids"), block_size=config.producer_id_block_size
            )
        except BaseException:
            self._store.close()
            raise
        try:
            # KIP-554's credentials, beside the metadata (the server serves them).
            self.scram = ScramStore(os.path.join(os.fspath(config.data_dir), "scram_credentials"))
        except BaseException:
            self._pids.close()
            self._store.close()
            raise
        self.version = 0
        self.cluster_id = uuid.UUID(int=0)  # set by _load
        self._broker_epoch_last = 0
        self._brokers: dict[int, BrokerRegistration] = {}
        self._last_heartbeat_ms: dict[int, int] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._num_partitions: dict[uuid.UUID, int] = {}
        self._parts: dict[TopicIdPartition, PartitionInfo] = {}
        self._offline: set[TopicIdPartition] = set()
        self._deleted: dict[uuid.UUID, str] = {}
        self._configs: dict[uuid.UUID, Overrides] = {}  # the configured topics' overrides
        self._events: deque[ControllerEvent] = deque(maxlen=EVENTS_MAX)
        self._snapshot: MetadataSnapshot | None = None
        self._next_preferred_check_ms = now_ms + config.leader_imbalance_check_interval_ms
        # In-memory counters (like metrics, they restart at 0).
        self.leader_elections = 0
        self.unclean_leader_elections = 0
        self.preferred_leader_elections = 0
        try:
            self._load(now_ms)
        except BaseException:
            self.close()
            raise

    # -------------------------------------------------------- persistence

    def _load(self, now_ms: int) -> None:
        stored = self._store.load()
        self.version = stored.version
        self._broker_epoch_last = stored.broker_epoch_last
        for b in stored.brokers.values():
            self._brokers[b.broker_id] = b
            if not b.fenced:
                # Not heard from yet: a full session from our start.
                self._last_heartbeat_ms[b.broker_id] = now_ms
        for tid, (name, n) in stored.topics.items():
            self._topic_names[tid] = name
            self._topic_ids[name] = tid
            self._num_partitions[tid] = n
        self._deleted.update(stored.deleted)
        self._configs.update(stored.configs)
        for tp, p in stored.parts.items():
            self._parts[tp] = p
            if p.leader == NO_LEADER:
                self._offline.add(tp)
        wanted = self.config.cluster_id
        if stored.cluster_id is not None:
            self.cluster_id = stored.cluster_id
            if wanted is not None and wanted != self.cluster_id:
                raise ControllerStateError(
                    f"{self.config.data_dir}: holds cluster {self.cluster_id}, not the configured cluster {wanted}"
                )
        elif stored.formatted and (self._brokers or self._parts):
            # State from before cluster ids: its topics and brokers belong to
            # a cluster nobody named, and walmgr could not tell it apart.
            raise ControllerStateError(f"{self.config.data_dir}: controller state without a cluster id")
        else:
            self.cluster_id = wanted if wanted is not None else self._new_uuid()
        if not stored.formatted or stored.cluster_id is None:
            self._store.write_identity(self.version, self.cluster_id)
        self.check()

    def _commit(self, d: _Draft) -> None:
        """Write ``d`` in one durable transaction with version + 1, then apply
        it (nothing is applied when the write fails)."""
        if d.empty():
            return
        version = self.version + 1
        self._store.commit(
            version,
            broker_epoch_last=d.broker_epoch_last,
            brokers=d.brokers.values(),
            new_topics=d.new_topics,
            parts=d.parts,
            deleted_topics={tid: (name, self._num_partitions[tid]) for tid, name in d.deleted_topics.items()},
            configs=d.configs,
        )
        # Durable: now publish.
        self.version = version
        if d.broker_epoch_last is not None:
            self._broker_epoch_last = d.broker_epoch_last
        self._brokers.update(d.brokers)
        for tid, (name, n) in d.new_topics.items():
            self._topic_names[tid] = name
            self._topic_ids[name] = tid
            self._num_partitions[tid] = n
        self._parts.update(d.parts)
        self._configs.update(d.configs)
        for tp, p in d.parts.items():
            if p.leader == NO_LEADER:
                self._offline.add(tp)
            else:
                self._offline.discard(tp)
        for tid, name in d.deleted_topics.items():
            for index in range(self._num_partitions.pop(tid)):
                gone = TopicIdPartition(tid, index)
                del self._parts[gone]
                self._offline.discard(gone)
            del self._topic_names[tid]
            del self._topic_ids[name]
            self._configs.pop(tid, None)
            self._deleted[tid] = name
        self._events.extend(d.events)
        self.leader_elections += d.elections
        self.unclean_leader_elections += d.unclean_elections
        self.preferred_leader_elections += d.preferred_elections
        self._snapshot = None

    def close(self) -> None:
        self.scram.close()
        self._pids.close()
        self._store.close()  # releases the directory

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- brokers

    def register_broker(
        self, broker_id: int, az: str, host: str, port: int, now_ms: int, kafka_port: int = 0,
        kafka_listeners: str = "", unclean_shutdown: bool = False,
    ) -> int | Errors:  # fmt: skip
        """Start a new incarnation of ``broker_id``; returns its broker epoch
        (or INVALID_REQUEST when BROKERS_MAX distinct brokers are known).

        An incarnation still alive under an older epoch is fenced first (the
        broker restarted within its session timeout and lost its in-memory
        state).  After an unclean shutdown it then leaves every ISR and ELR
        (KIP-966).  Offline partitions are then re-elected."""
        check_broker_args(broker_id, az, host, port)
        if type(kafka_port) is not int or not 0 <= kafka_port <= PORT_MAX:
            raise ValueError(f"kafka_port must be in [0, {PORT_MAX}], got {kafka_port!r}")
        if kafka_listeners:
            kafka_listener_ports(kafka_listeners)  # ValueError when malformed
        old = self._brokers.get(broker_id)
        if old is None and len(self._brokers) >= BROKERS_MAX:
            return Errors.INVALID_REQUEST
        d = _Draft(self)
        if old is not None and not old.fenced:
            d.fence([broker_id], FENCED_NEW_INCARNATION)
        epoch = self._broker_epoch_last + 1
        d.broker_epoch_last = epoch
        d.brokers[broker_id] = BrokerRegistration(
            broker_id, az, host, port, epoch, fenced=False, kafka_port=kafka_port, kafka_listeners=kafka_listeners
        )
        d.events.append(BrokerRegistered(broker_id, epoch, az, host, port))
        if unclean_shutdown:
            d.forget(broker_id)
        d.reconcile({broker_id}, REASON_BROKER_REGISTERED)
        self._commit(d)
        self._last_heartbeat_ms[broker_id] = now_ms
        return epoch

    def _check_sender(self, broker_id: int, broker_epoch: int) -> Errors:
        b = self._brokers.get(broker_id)
        if b is None:
            return Errors.BROKER_ID_NOT_REGISTERED
        if broker_epoch != b.broker_epoch:
            return Errors.STALE_BROKER_EPOCH
        if b.fenced:
            return Errors.BROKER_ID_NOT_REGISTERED
        return Errors.NONE

    def heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> Errors:
        """NONE, STALE_BROKER_EPOCH (an older incarnation) or
        BROKER_ID_NOT_REGISTERED (unknown or fenced: register again)."""
        err = self._check_sender(broker_id, broker_epoch)
        if err == Errors.NONE:
            self._last_heartbeat_ms[broker_id] = max(now_ms, self._last_heartbeat_ms.get(broker_id, now_ms))
        return err

    def tick(self, now_ms: int) -> None:
        """Fence brokers silent for longer than the session timeout, elect
        leaders for offline partitions (unclean, if enabled), and run the
        periodic preferred-leader election when due.  One transaction."""
        timeout = self.config.broker_session_timeout_ms
        expired = sorted(
            bid for bid, b in self._brokers.items() if not b.fenced and now_ms - self._last_heartbeat_ms[bid] > timeout
        )
        d = _Draft(self)
        if expired:
            d.fence(expired, FENCED_SESSION_TIMEOUT)
        elif self.config.unclean_leader_election_enable and self._offline:
            d.reconcile(set(), REASON_OFFLINE)
        interval = self.config.leader_imbalance_check_interval_ms
        if interval and now_ms >= self._next_preferred_check_ms:
            self._next_preferred_check_ms = now_ms + interval
            d.elect_preferred()
        self._commit(d)
        for bid in expired:
            self._last_heartbeat_ms.pop(bid, None)

    def elect_preferred_leaders(self) -> None:
        """Run the preferred-leader election now (what ``tick`` does every
        ``leader_imbalance_check_interval_ms``)."""
        d = _Draft(self)
        d.elect_preferred()
        self._commit(d)

    # -------------------------------------------------------------- topics

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str] | None = None
    ) -> TopicInfo | Errors:
        """One topic by :meth:`create_topics` (a Refused is only for assignments)."""
        answer = self.create_topics([NewTopic(name, partitions, replication_factor, configs)])[name]
        return answer.error if isinstance(answer, Refused) else answer

    def create_topics(self, topics: Sequence[NewTopic]) -> dict[str, TopicInfo | Errors | Refused]:
        """Create topics over the alive brokers (or as their assignments say),
        ISR = replicas, epochs 0, all in ONE transaction (one fsync, one new
        version), each decided as :func:`~partlog.controller.topic_create.plan_topic`
        says.  Re-creating a topic with the same shape answers it unchanged
        (a retried or concurrent create succeeds); another shape is
        TOPIC_ALREADY_EXISTS."""
        alive = [b.info() for b in self._brokers.values() if not b.fenced]
        state = CreateState(alive, self._brokers.__contains__, len(self._parts), self.topic)
        # A repeating uuid source: refuse rather than merge two topics (or
        # bring back a deleted one, whose objects walmgr may delete).
        out = plan_topics(topics, state, self._new_uuid, lambda t: t in self._topic_names or t in self._deleted)
        d = _Draft(self)
        for name, a in out.items():
            if isinstance(a, TopicInfo) and a.topic_id not in self._topic_names:
                d.new_topics[a.topic_id] = (name, a.num_partitions)
                if a.configs is not None:
                    d.configs[a.topic_id] = a.configs
                for p, part in enumerate(a.partitions):
                    d.parts[TopicIdPartition(a.topic_id, p)] = part
        self._commit(d)
        return out

    def create_partitions(
        self, name: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool = False
    ) -> TopicInfo | Refused:
        """Grow topic ``name`` to ``count`` partitions (Kafka's CreatePartitions), as
        :func:`~partlog.controller.rules.added_partitions` decides, in one transaction with the
        topic's new count (``validate_only``: decide, write nothing); existing partitions untouched."""
        tid = self._topic_ids.get(name)
        if tid is None:
            return Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        info = self._topic_info(tid)
        alive = [b.info() for b in self._brokers.values() if not b.fenced]
        new = added_partitions(name, info.partitions, count, assignments, alive_brokers=alive,
                               registered=self._brokers.__contains__, cluster_partitions=len(self._parts))  # fmt: skip
        if isinstance(new, Refused) or validate_only:
            return new if isinstance(new, Refused) else replace(info, partitions=(*info.partitions, *new))
        d = _Draft(self)
        d.new_topics[tid] = (name, count)
        for i, p in enumerate(new, start=info.num_partitions):
            d.parts[TopicIdPartition(tid, i)] = p
        self._commit(d)
        return self._topic_info(tid)

    def delete_topics(self, names: Iterable[str]) -> dict[str, uuid.UUID | Errors]:
        """Delete topics (Kafka's DeleteTopics): one durable change for all
        of them. Per name: the deleted topic's id, or UNKNOWN_TOPIC_OR_PARTITION.
        A deleted topic's id is kept for good, in every snapshot, so brokers
        drop its logs and walmgr knows its partitions reference nothing."""
        d = _Draft(self)
        out: dict[str, uuid.UUID | Errors] = {}
        for name in names:
            if name in out:
                continue  # named twice: one answer, one deletion
            tid = self._topic_ids.get(name)
            if tid is None:
                out[name] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if len(self._deleted) + len(d.deleted_topics) >= DELETED_TOPICS_MAX:
                out[name] = Errors.POLICY_VIOLATION
                continue
            d.deleted_topics[tid] = name
            d.events.append(TopicDeleted(name, tid))
            out[name] = tid
        self._commit(d)
        return out

    def alter_topic_configs(
        self, changes: Mapping[str, ConfigChange], *, validate_only: bool = False
    ) -> dict[str, tuple[Errors, str | None]]:
        """Kafka's IncrementalAlterConfigs / AlterConfigs on topics, one
        durable change for all: per name NONE, INVALID_CONFIG with Kafka's
        message (checked first, as Kafka's controller) or
        UNKNOWN_TOPIC_OR_PARTITION.  A topic once configured stays so (its
        overrides may become empty): brokers then follow the controller."""
        d = _Draft(self)
        out: dict[str, tuple[Errors, str | None]] = {}
        for name, change in changes.items():
            tid = self._topic_ids.get(name)
            err, why, new = alter_overrides(None if tid is None else self._configs.get(tid), change)
            if err == Errors.NONE and tid is None:
                err = Errors.UNKNOWN_TOPIC_OR_PARTITION
            out[name] = (err, why)
            if err == Errors.NONE and not validate_only and tid is not None and self._configs.get(tid) != new:
                d.configs[tid] = new
        self._commit(d)
        return out

    def alter_partition(
        self,
        broker_id: int,
        broker_epoch: int,
        tp: TopicIdPartition,
        leader_epoch: int,
        partition_epoch: int,
        new_isr: Iterable[int],
    ) -> PartitionInfo | Errors:
        """The leader's ISR change (Kafka's AlterPartition), checked in this
        order: STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED (the sender),
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (the sender does
        not lead), FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION (partition
        epoch), INVALID_REQUEST (duplicate ids), INELIGIBLE_REPLICA (not a
        subset of the replicas, without the leader, or adding a replica that
        is not alive).  Success commits the ISR (in replicas order) with
        partition_epoch + 1 and returns the new state; the current ISR
        again returns the current state unchanged."""
        err = self._check_sender(broker_id, broker_epoch)
        if err != Errors.NONE:
            return err
        p = self._parts.get(tp)
        asked = list(new_isr)
        err = check_alter_partition(p, broker_id, leader_epoch, partition_epoch, asked)
        if err != Errors.NONE:
            return err
        assert p is not None
        wanted = set(asked)
        d = _Draft(self)
        if any(not d.alive(r) for r in wanted - set(p.isr)):
            return Errors.INELIGIBLE_REPLICA
        isr = tuple(r for r in p.replicas if r in wanted)
        if isr == p.isr:
            return p
        d.set_part(tp, elr.shrink(p, isr, d.min_isr(tp)), REASON_ALTER_PARTITION)
        self._commit(d)
        # An ISR that completed a reassignment may have moved the leadership (Kafka's answer).
        return self._parts[tp] if self._parts[tp].leader == broker_id else Errors.NEW_LEADER_ELECTED

    def alter_reassignments(
        self, changes: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> dict[tuple[str, int], Refused | None]:
        """Kafka's AlterPartitionReassignments, one durable change for all, each
        partition as :func:`~partlog.controller.reassignment.decide_reassignment`
        decides: None when done (started, replaced, completed, cancelled, or nothing to do)."""
        d, out, unclean = (
            _Draft(self),
            dict[tuple[str, int], Refused | None](),
            self.config.unclean_leader_election_enable,
        )
        for (name, index), target in changes.items():
            tp = TopicIdPartition(self._topic_ids.get(name) or uuid.UUID(int=0), index)
            p = d.part(tp) if tp in self._parts else None
            new = decide_reassignment(name, index, target, p, topic_known=name in self._topic_ids,
                                      registered=self._brokers.__contains__, alive=d.alive,
                                      unclean=unclean)  # fmt: skip
            out[(name, index)] = new if isinstance(new, Refused) else None
            if not isinstance(new, Refused):
                d.set_part(tp, new, REASON_REASSIGNMENT)
        self._commit(d)
        return out

    # -------------------------------------------------------- producer ids

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock | Errors:
        """The next block of producer ids for an alive broker, durable before
        it is returned (STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED as for
        heartbeats; UNKNOWN_SERVER_ERROR after 2^63 ids, as Kafka)."""
        err = self._check_sender(broker_id, broker_epoch)
        if err != Errors.NONE:
            return err
        try:
            return self._pids.allocate(broker_id)
        except ProducerIdsExhaustedError:
            return Errors.UNKNOWN_SERVER_ERROR

    # ---------------------------------------------------------- inspection

    def snapshot(self) -> MetadataSnapshot:
        """The current metadata: version, ALIVE brokers (by id), all topics
        (by name).  Cached until the next change."""
        if self._snapshot is None or self._snapshot.version != self.version:
            brokers = [b.info() for b in sorted(self._brokers.values(), key=lambda b: b.broker_id) if not b.fenced]
            topics = [self._topic_info(self._topic_ids[n]) for n in sorted(self._topic_ids)]
            self._snapshot = MetadataSnapshot(self.version, brokers, topics, self.cluster_id, frozenset(self._deleted))
        return self._snapshot

    def _topic_info(self, tid: uuid.UUID) -> TopicInfo:
        n = self._num_partitions[tid]
        parts = tuple(self._parts[TopicIdPartition(tid, p)] for p in range(n))
        return TopicInfo(tid, self._topic_names[tid], parts, self._configs.get(tid))

    def registration(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def registrations(self) -> list[BrokerRegistration]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def partition(self, tp: TopicIdPartition) -> PartitionInfo | None:
        return self._parts.get(tp)

    def topic(self, name: str) -> TopicInfo | None:
        tid = self._topic_ids.get(name)
        return None if tid is None else self._topic_info(tid)

    @property
    def offline_partitions(self) -> int:
        return len(self._offline)

    def take_events(self) -> list[ControllerEvent]:
        """Events since the last call (the shell logs them)."""
        out = list(self._events)
        self._events.clear()
        return out

    def check(self) -> None:
        """Assert the invariants every committed state keeps (tests call it after each step):
        each partition's (:func:`~partlog.controller.reassignment.state_error`), the tables' agreement."""
        for tp, p in self._parts.items():
            assert state_error(p, _Draft(self).alive) is None, f"{tp}: {state_error(p, _Draft(self).alive)}: {p}"
        assert self._offline == {tp for tp, p in self._parts.items() if p.leader == NO_LEADER}
        assert not self._deleted.keys() & self._topic_names.keys(), "a topic both live and deleted"
        assert self._configs.keys() <= self._topic_names.keys(), "configs of no live topic"
        assert all(tp.topic_id in self._num_partitions for tp in self._parts), "a partition of no topic"
        for tid, n in self._num_partitions.items():
            assert all(TopicIdPartition(tid, p) in self._parts for p in range(n)), f"topic {tid}: partitions missing"
        assert all(b.broker_epoch <= self._broker_epoch_last for b in self._brokers.values())
