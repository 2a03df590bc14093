"""Cluster metadata on etcd: :class:`EtcdMetadata`, a
:class:`~partlog.controller.cluster_meta.MetadataSource` whose state lives in
an etcd v3 cluster under a key prefix (layout: :mod:`partlog.controller.etcd_layout`).

One object serves every role, as :class:`~partlog.controller.client.ControllerMetadata`
does for the embedded controller; each role is a part it composes, over one
shared client (:mod:`partlog.controller.etcd_connection`):

* **A view** (every instance, here): one range read of the prefix, then a
  watch from the revision after it; each change is applied to the view, and
  the listeners run once per burst of events.  No full snapshot is read per
  change; one is read again only when the watch's revision was compacted.
* **A broker session** (with ``broker``; :mod:`partlog.controller.etcd_session`):
  a lease of the session timeout, kept alive every third of it, and
  ``brokers/<id>`` put under it.  The put's revision is the broker epoch.  A
  lease that expired (etcd did not hear from us for a session) fences the
  broker: the next registration is a new incarnation with a new epoch, and
  the listeners run (the broker re-derives its roles, as after a fencing by
  the embedded controller).
* **The acting controller** (brokers campaign by default;
  :mod:`partlog.controller.etcd_acting`): etcd's election recipe over the
  session lease (a candidate key per lease, the lowest create revision
  leads), then :func:`partlog.controller.etcd_controller.plan` after every
  change of the view, each decision written by one transaction guarded by
  the candidate key (a deposed controller's writes fail) and by the
  partition's mod revision (a stale decision fails).
* **Direct transactions** for what needs no single actor
  (:mod:`partlog.controller.etcd_admin`): AlterPartition (compare the
  partition's revision and the sender's broker epoch), producer-id blocks
  (compare-and-swap on a counter, KIP-730's scheme), topic creation and
  deletion, reassignments.

When etcd cannot be reached the view stays as it was, so brokers keep
serving with their last view, as Kafka brokers do; calls that need the
quorum answer retriable errors (``COORDINATOR_NOT_AVAILABLE``,
``REQUEST_TIMED_OUT``) and every loop retries with capped backoff, logging
and counting each failure (``failures``, under this module's logger).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence

import aetcd.exceptions
from aetcd.rtypes import EventKind

from partlog.controller.cluster_meta import (
    BrokerInfo,
    ClusterMismatchError,
    ConfigChange,
    MetadataError,
    PartitionInfo,
    TopicInfo,
    check_same_cluster,
)
from partlog.controller.etcd_acting import EtcdActingController
from partlog.controller.etcd_admin import EtcdAdmin
from partlog.controller.etcd_connection import ETCD_ERRORS, EtcdConnection
from partlog.controller.etcd_layout import KV, EtcdTarget, EtcdView, Keys, dec_uuid, pack_value, parse_etcd_url
from partlog.controller.etcd_session import EtcdSession
from partlog.controller.model import BROKER_SESSION_TIMEOUT_MS_DEFAULT, LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT
from partlog.controller.partition_admin import NewPartitions
from partlog.controller.reassignment import Reassignment, listed
from partlog.controller.rules import Refused
from partlog.controller.topic_create import Assignment, NewTopic
from partlog.controller.view import SnapshotView
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import PRODUCER_ID_BLOCK_SIZE, ProducerIdBlock
from partlog.kafka.records import TopicIdPartition
from partlog.runtime import SYSTEM_CLOCK, SYSTEM_ENTROPY, Clock, Entropy

__all__ = ["EtcdMetadata", "EtcdUnavailableError"]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS_DEFAULT = 5_000
RETRY_BACKOFF_MS_DEFAULT = 100
RETRY_BACKOFF_MAX_MS_DEFAULT = 1_000
# etcd grants no lease shorter than 1.5 election timeouts (2 s with its
# defaults), and lease TTLs are whole seconds.
SESSION_TIMEOUT_MS_MIN = 2_000


class EtcdUnavailableError(ConnectionError):
    """etcd gave no usable answer."""


class EtcdMetadata(SnapshotView):
    """Cluster metadata in etcd at ``target`` (an ``etcd://`` URL or an
    :class:`EtcdTarget`).

    ``broker``: this broker (registers, keeps a session, campaigns for the
    controller role unless ``campaign`` is False), or None for a view only
    (clients, walmgr, the topics tool).  ``cluster_id``: the cluster this
    side belongs to (None: adopt etcd's).  ``create_cluster``: make the
    cluster id under the prefix when there is none (brokers do; a view never
    does, so a mistyped prefix is an error, not a new empty cluster).

    ``await connect()`` returns the cluster id; ``await start()`` returns
    once registered and holding a first view.  Both retry while etcd is
    unreachable, for at most ``timeout_ms`` (then
    :class:`ControllerUnavailableError`); a prefix of another cluster, or of
    none, raises :class:`ClusterMismatchError` at once."""

    def __init__(
        self,
        target: EtcdTarget | str,
        broker: BrokerInfo | None = None,
        *,
        cluster_id: uuid.UUID | None = None,
        create_cluster: bool = False,
        campaign: bool | None = None,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS_DEFAULT,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS_DEFAULT,
        unclean_leader_election_enable: bool = False,
        leader_imbalance_check_interval_ms: int = LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT,
        producer_id_block_size: int = PRODUCER_ID_BLOCK_SIZE,
        clock: Clock = SYSTEM_CLOCK,
        entropy: Entropy = SYSTEM_ENTROPY,
    ) -> None:
        super().__init__(cluster_id)
        # The acting controller's timers (monotonic); new cluster and topic ids.
        self.clock = clock
        self.entropy = entropy
        self.target = target if isinstance(target, EtcdTarget) else parse_etcd_url(target)
        if session_timeout_ms < SESSION_TIMEOUT_MS_MIN:
            raise ValueError(
                f"EtcdMetadata session_timeout_ms must be >= {SESSION_TIMEOUT_MS_MIN}, got {session_timeout_ms}"
            )
        for name, v in (
            ("request_timeout_ms", request_timeout_ms),
            ("retry_backoff_ms", retry_backoff_ms),
            ("producer_id_block_size", producer_id_block_size),
        ):
            if type(v) is not int or v <= 0:
                raise ValueError(f"EtcdMetadata {name} must be an integer > 0, got {v!r}")
        if retry_backoff_max_ms < retry_backoff_ms or leader_imbalance_check_interval_ms < 0:
            raise ValueError("EtcdMetadata needs retry_backoff_max_ms >= retry_backoff_ms and an interval >= 0")
        self.broker_info = broker
        self.create_cluster = create_cluster
        self.campaign = broker is not None if campaign is None else campaign
        if self.campaign and broker is None:
            raise ValueError("EtcdMetadata: only a broker campaigns (its session lease backs the candidacy)")
        self.session_timeout_ms = session_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self.leader_imbalance_check_interval_ms = leader_imbalance_check_interval_ms
        self.producer_id_block_size = producer_id_block_size
        self.keys = Keys(self.target.prefix)
        self.view = EtcdView(self.keys)
        self.conn = EtcdConnection(self.target, request_timeout_ms)
        self._adopt_pending = False
        # The parts (see the module doc); a view only has no session and
        # does not campaign.
        self.session = (
            None
            if broker is None
            else EtcdSession(
                self.conn, self.keys, broker, session_timeout_ms, failed=self._failed, backoff=self._backoff
            )
        )
        self.acting = (
            None
            if self.session is None or not self.campaign
            else EtcdActingController(
                self.conn,
                self.keys,
                self.view,
                self.session,
                unclean_leader_election_enable=unclean_leader_election_enable,
                leader_imbalance_check_interval_ms=leader_imbalance_check_interval_ms,
                failed=self._failed,
                backoff=self._backoff,
                view_changed=lambda: self._view_changed,
                schedule_adopt=self._schedule_adopt,
                clock=clock,
            )
        )
        self._admin = EtcdAdmin(
            self.conn,
            self.keys,
            self.view,
            self.session,
            producer_id_block_size=producer_id_block_size,
            failed=self._failed,
            schedule_adopt=self._schedule_adopt,
            view_until=self._view_until,
            new_uuid=entropy.uuid4,
        )

    # ------------------------------------------------------------ lifecycle

    @property
    def cluster_id(self) -> uuid.UUID | None:
        return self._cluster_id

    @property
    def broker_epoch(self) -> int:
        """This broker's current epoch (-1: not registered)."""
        return -1 if self.session is None else self.session.broker_epoch

    def describe(self) -> str:
        return self.target.url()

    def _where(self) -> str:
        return f"etcd {self.target.url()}"

    async def connect(self, *, timeout_ms: int | None = None) -> uuid.UUID:
        """Reach etcd and settle the cluster id (see the class doc)."""
        async with self._bounded(timeout_ms, "answer"):
            attempt = 0
            while True:
                try:
                    return await self._settle_cluster()
                except ETCD_ERRORS as e:
                    self._failed("connect", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1

    async def start(self, *, timeout_ms: int | None = None) -> None:
        async with self._bounded(timeout_ms, "view"):
            await self.connect()
            attempt = 0
            while True:
                try:
                    await self._load()
                    break
                except ETCD_ERRORS as e:
                    self._failed("read", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
            if self.session is not None:
                assert self._cluster_id is not None  # settled by connect()
                await self.session.register(self._cluster_id)
        self._spawn(self._watch_loop())
        if self.session is not None:
            assert self._cluster_id is not None
            self._spawn(self.session.run(self._cluster_id, self._notify))
        if self.acting is not None:
            self._spawn(self.acting.run())
        if self.session is not None:
            # A broker takes no role before the acting controller accepted
            # this incarnation: until then the view may still show partitions
            # its previous incarnation led.
            async with self._bounded(timeout_ms, "acceptance of this broker by the acting controller"):
                while not self.accepted:
                    await self._view_changed.wait()

    @property
    def accepted(self) -> bool:
        """This broker's current incarnation is accepted (see etcd_controller)."""
        s = self.session
        return s is not None and s.broker_epoch > 0 and self.view.incarnations.get(s.broker.broker_id) == s.broker_epoch

    async def stop(self, *, revoke: bool = False) -> None:
        """End the background tasks.  ``revoke``: end the session now (the
        broker is fenced at once); by default it ends when the lease
        expires, as a crashed broker's would."""
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.conn.close(revoke_lease=self.session.lease_id if revoke and self.session is not None else 0)
        if self.acting is not None:
            self.acting.is_controller = False

    # ------------------------------------------------------------- identity

    async def _settle_cluster(self) -> uuid.UUID:
        c = await self.conn.client()
        t = c.transactions
        while True:
            got = await c.get(self.keys.cluster_id)
            if got is not None:
                theirs = dec_uuid(got.value, f"etcd {self.target.url()}: cluster_id")
                check_same_cluster(f"etcd prefix {self.target.prefix}", theirs, "this side", self._cluster_id)
                self._cluster_id = theirs
                return theirs
            if not self.create_cluster:
                raise ClusterMismatchError(
                    f"etcd {self.target.url()}: no cluster under prefix {self.target.prefix} "
                    f"({self.target.prefix}/cluster_id is missing; brokers create it): check the prefix"
                )
            cid = self._cluster_id or self.entropy.uuid4()
            # The producer-id counter is born with the cluster: a missing one
            # later means it was deleted, and is refused (never restarted at 0).
            ok, _ = await self.conn.txn(
                [t.create(self.keys.cluster_id) == 0, t.create(self.keys.producer_ids) == 0],
                [t.put(self.keys.cluster_id, str(cid).encode()), t.put(self.keys.producer_ids, pack_value(0))],
            )
            if ok:
                log.info("etcd %s: created cluster %s", self.target.url(), cid)

    # ----------------------------------------------------------------- view

    async def _load(self) -> None:
        c = await self.conn.client()
        got = await c.get_prefix(self.keys.root)
        self.view.load((KV(kv.key, kv.value, kv.create_revision, kv.mod_revision) for kv in got), got.header.revision)
        self._adopt_now()

    async def _watch_loop(self) -> None:
        attempt = 0
        while True:
            try:
                c = await self.conn.client()
                watch = await c.watch_prefix(self.keys.root, start_revision=self.view.revision + 1)
                try:
                    me = asyncio.current_task()
                    if me is not None and me.cancelling():
                        # Python 3.11's asyncio.wait_for (in aetcd's watch
                        # creation) can swallow a cancel: stop() would wait for
                        # ever (`partlog users --metadata etcd://` hung in CI).
                        raise asyncio.CancelledError
                    async for ev in watch:
                        attempt = 0
                        kv = ev.kv
                        value = None if ev.kind == EventKind.DELETE else kv.value
                        self.view.apply(KV(kv.key, value, kv.create_revision, kv.mod_revision))
                        self._schedule_adopt()
                finally:
                    with contextlib.suppress(*ETCD_ERRORS):
                        await watch.cancel()
            except aetcd.exceptions.RevisionCompactedError as e:
                # Our revision is gone from etcd's history: read it all again.
                log.warning("etcd %s: watch revision compacted (%s): reading the prefix again", self.target.url(), e)
                try:
                    await self._load()
                except ETCD_ERRORS as e2:
                    self._failed("read", e2)
                except MetadataError as e2:
                    # etcd answered an older revision than this view applied
                    # (restored from a backup?): freeze, refuse every write.
                    self.view.frozen = True
                    log.error("%s: %s; metadata is frozen and writes are refused until restart", self._where(), e2)
                    return
            except ETCD_ERRORS as e:
                self._failed("watch", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1

    def _schedule_adopt(self) -> None:
        # One adoption per burst: the events of one transaction arrive
        # together, and listeners see them at once.
        if not self._adopt_pending:
            self._adopt_pending = True
            asyncio.get_running_loop().call_soon(self._adopt_now)

    def _adopt_now(self) -> None:
        self._adopt_pending = False
        s = self.view.snapshot()
        if s.version != self._version:
            self._adopt(s)
        if self.session is not None:
            self.session.check_view(self.view)

    # ----------------------------------------------------------- the parts'

    @property
    def is_controller(self) -> bool:
        """This broker is the acting controller."""
        return self.acting is not None and self.acting.is_controller

    @property
    def registrations(self) -> int:
        return 0 if self.session is None else self.session.registrations

    @property
    def duplicate_waits(self) -> int:
        """Registration attempts refused because another session holds the id."""
        return 0 if self.session is None else self.session.duplicate_waits

    @property
    def keepalives(self) -> int:
        return 0 if self.session is None else self.session.keepalives

    def session_stats(self) -> dict[str, float]:
        """The session's counters by name (broker metrics; zeros without one)."""
        s = self.session
        names = ("registrations", "duplicate_waits", "keepalives", "keepalive_retries", "keepalive_refuted",
                 "keepalive_gap_s_max")  # fmt: skip
        return {n: float(getattr(s, n)) if s is not None else 0.0 for n in names}

    @property
    def elections_won(self) -> int:
        return 0 if self.acting is None else self.acting.elections_won

    @property
    def controller_writes(self) -> int:
        return 0 if self.acting is None else self.acting.controller_writes

    @property
    def controller_conflicts(self) -> int:
        return 0 if self.acting is None else self.acting.controller_conflicts

    @property
    def controller_txns(self) -> int:
        """Transactions sent for partition changes (each carries a chunk)."""
        return 0 if self.acting is None else self.acting.controller_txns

    @property
    def leader_elections(self) -> int:
        return 0 if self.acting is None else self.acting.leader_elections

    @property
    def controller_write_s(self) -> float:
        """Seconds the acting controller spent in its partition transactions
        (the benchmark's elections/s divides by it)."""
        return 0.0 if self.acting is None else self.acting.controller_write_s

    async def alter_partition(
        self, broker_id: int, tp: TopicIdPartition, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
    ) -> PartitionInfo | Errors:
        """Kafka's AlterPartition as one transaction (see :meth:`EtcdAdmin.alter_partition`)."""
        return await self._admin.alter_partition(broker_id, tp, leader_epoch, partition_epoch, isr)

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock | Errors:
        """The next block of producer ids, by compare-and-swap (see
        :meth:`EtcdAdmin.allocate_producer_ids`)."""
        return await self._admin.allocate_producer_ids(broker_id)

    async def create_topics(
        self,
        topics: Mapping[str, tuple[int, int]],
        configs: Mapping[str, Mapping[str, str]] | None = None,
        *,
        assignments: Mapping[str, Sequence[Assignment]] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, TopicInfo | Errors | Refused]:
        """Create topics ``{name: (partitions, replication_factor)}`` (and
        the manual ``assignments`` of those that have them) in as few
        transactions as etcd takes (:meth:`EtcdAdmin.create_topics`); answers as
        :meth:`ControllerMetadata.create_topics`, once this view holds them.
        Replicas are assigned over the brokers the acting controller has
        accepted.  Past ``timeout_ms`` the topics not yet answered are
        REQUEST_TIMED_OUT (the one in flight may still be created)."""
        out: dict[str, TopicInfo | Errors | Refused] = {}
        created: set[uuid.UUID] = set()
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                asked = [
                    NewTopic(name, p, rf, (configs or {}).get(name), tuple((assignments or {}).get(name, ())) or None)
                    for name, (p, rf) in topics.items()
                ]
                out.update(await self._admin.create_topics(asked, self._cluster_id))
                created.update(a.topic_id for a in out.values() if isinstance(a, TopicInfo))
                await self._view_until(lambda: created <= self._topics.keys())
        except TimeoutError:
            late = Refused(Errors.REQUEST_TIMED_OUT, f"not done within {timeout_ms} ms: the topic may still be created")
            out.update((name, late) for name in topics if name not in out)
        for name, answer in out.items():
            if isinstance(answer, TopicInfo):
                out[name] = self.topic(name) or answer
        return out

    async def create_partitions(
        self, topics: Mapping[str, NewPartitions], validate_only: bool
    ) -> dict[str, TopicInfo | Refused]:
        """Grow topics, each by one transaction (see
        :meth:`EtcdAdmin.create_partitions`); answers once this view holds
        the new partitions."""
        out: dict[str, TopicInfo | Refused] = {}
        for name, asked in topics.items():
            out[name] = await self._admin.create_partitions(name, asked, validate_only, self._cluster_id)
        grown = {t.topic_id: t.num_partitions for t in out.values() if isinstance(t, TopicInfo)}
        if not validate_only:
            await self._view_grown(grown)
            for name, answer in out.items():
                if isinstance(answer, TopicInfo):
                    out[name] = self.topic(name) or answer
        return out

    async def alter_reassignments(
        self, changes: Mapping[tuple[str, int], tuple[int, ...] | None]
    ) -> dict[tuple[str, int], Refused | None]:
        """Start, replace or cancel reassignments, each partition by one
        compare-and-swap (see :meth:`EtcdAdmin.alter_reassignment`); answers
        once this view holds them."""
        unclean = self.unclean_leader_election_enable
        out = {
            (name, index): await self._admin.alter_reassignment(name, index, target, unclean=unclean)
            for (name, index), target in changes.items()
        }
        # The last write's revision: the adopted view holds every change once it is there.
        written = 0
        for name, index in out:
            got = self.view.topic_of(name)
            if got is not None:
                written = max(written, self.view.part_revision(TopicIdPartition(got[0], index)))
        await self._view_until(lambda: self._version >= written)
        return out

    async def list_reassignments(self, partitions: Iterable[tuple[str, int]] | None) -> list[Reassignment]:
        """The reassignments in progress this view holds (see
        :class:`~partlog.controller.reassignment.ReassignmentAdmin`)."""
        return listed(self.topics(), partitions)

    async def delete_topics(self, names: list[str]) -> dict[str, uuid.UUID | Errors]:
        """Delete topics by name, each by one transaction (the topic key,
        its partitions, and the deleted record, kept for good); answers once
        this view no longer holds them."""
        out: dict[str, uuid.UUID | Errors] = {}
        for name in names:
            if name not in out:
                out[name] = await self._admin.delete_topic(name)
        gone = {t for t in out.values() if isinstance(t, uuid.UUID)}
        await self._view_until(lambda: not gone & self._topics.keys())
        return out

    async def alter_topic_configs(
        self, changes: Mapping[str, ConfigChange], *, validate_only: bool
    ) -> dict[str, tuple[Errors, str | None]]:
        """Alter topics' config overrides, each by one compare-and-swap (see
        :meth:`EtcdAdmin.alter_topic_configs`); answers once this view holds them."""
        out: dict[str, tuple[Errors, str | None]] = {}
        written: dict[str, tuple[tuple[str, str], ...]] = {}
        for name, change in changes.items():
            err, why, new = await self._admin.alter_topic_configs(name, change, validate_only)
            out[name] = (err, why)
            if new is not None:
                written[name] = new
        await self._view_until(lambda: all(self._configs_seen(n, c) for n, c in written.items()))
        return out

    def _configs_seen(self, name: str, configs: tuple[tuple[str, str], ...]) -> bool:
        t = self.topic(name)
        return t is None or t.configs == configs
