"""A simulated world's configuration and outcome: the cluster's shape and
load (:class:`Shape`), the faults and their rates (:class:`Faults`), the
knobs every run shares (demo-sized deadlines, as ``partlog cluster``'s),
and what a run reports (:class:`Result`).

Plain values, no behaviour: the other modules of :mod:`simulations.dst`
read them; a run is ``simulations.dst.world.run(seed, shape, faults)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulations.dst.store import StoreFaults

TOPIC = "dst"
# Demo-sized deadlines, as partlog cluster's: walmgr's age gate is 3 s.
COMMIT_DEADLINE_MS = 2_000
MAX_CLOCK_SKEW_MS = 500
GRACE_MS = 500
SESSION_TIMEOUT_MS = 6_000  # the controller fences a silent broker after this (KRaft: 9 s)
HEARTBEAT_INTERVAL_MS = 500
WALMGR_CYCLE_MS = 1_000
# The brokers' release grace and answer age limit (partlog.store.release_grace),
# scaled down as the deadlines above, and walmgr's verdict window under half the grace.
RELEASE_GRACE_MS = 3_000
REPLICA_ANSWER_AGE_MAX_MS = 1_400
VERDICT_WINDOW_MS = 1_400
LEADER_IMBALANCE_CHECK_INTERVAL_MS = 5_000
# With Shape.tiering: the brokers' builder loop runs this often (1 s in
# production), so a seed builds and swaps several segments per partition.
TIERING_INTERVAL_MS = 500
BROKER_PORT_BASE = 9_100
# Faults.create_partitions_per_min grows the topic up to this many partitions.
GROWN_PARTITIONS_MAX = 40
# Faults.reassign_per_min: at most this many moves in progress at once
# (past it, the operator cancels one instead of starting another).
REASSIGNMENTS_IN_PROGRESS_MAX = 3


@dataclass(frozen=True)
class Shape:
    """The cluster (AZs, brokers, partitions, replication) and its load."""

    azs: int = 3
    brokers_per_az: int = 2
    partitions: int = 12
    replication_factor: int = 3
    # What acks=all users run for durability.  With 1, a power loss of a
    # lone ISR member loses what it acknowledged, in Kafka as here (seed 29
    # shows it: design.md, Durability).
    min_insync_replicas: int = 2
    producers_per_az: int = 1  # idempotent, acks=all
    rate_per_producer: float = 100.0  # records/s
    # Kafka's two other delivery contracts, beside the idempotent producers:
    # not idempotent with acks=all (duplicates allowed) and acks=1 (losses
    # allowed in a failover).  Placed in the AZs in turn.
    plain_producers: int = 1
    acks1_producers: int = 1
    rate_per_plain_producer: float = 50.0  # records/s
    # Transactional producers (simulations/dst/txn.py), placed in the AZs in
    # turn, with their coordinator's stand-in and a read_committed reader.
    # 0: none, and the run is exactly what it was before transactions.
    txn_producers: int = 0
    rate_per_txn_producer: float = 20.0  # records/s within a transaction
    txn_records: tuple[int, int] = (1, 8)  # records per transaction
    txn_abort_share: float = 0.3  # of transactions the producer aborts
    txn_timeout_ms: int = 10_000  # transaction.timeout.ms: the coordinator aborts later ones
    # Consume-transform-produce transformers (simulations/dst/ctp.py), each
    # with its input and state partition, on topics of their own; needs
    # txn_producers > 0 (they write the inputs).
    txn_transformers: int = 0
    # Tiered segments (partlog/broker/tiering.py): the topic is created with
    # remote.storage.enable=true and this segment.ms (virtual time; the load
    # never fills Kafka's smallest segment.bytes, 1 MiB), so the leaders'
    # builder loops upload segments and swap references while the faults
    # run, and followers apply the swaps.  False: nothing of it runs.
    tiering: bool = False
    tiering_segment_ms: int = 1_000
    duration_s: float = 30.0  # faults happen during this
    settle_s: float = 15.0  # after it, faults stop and the cluster heals


@dataclass(frozen=True)
class Faults:
    """How often each fault happens (per simulated minute) and how long it lasts."""

    broker_crashes_per_min: float = 2.0
    restart_after_s: tuple[float, float] = (0.5, 6.0)
    az_partitions_per_min: float = 1.0
    partition_s: tuple[float, float] = (0.5, 5.0)
    black_hole_share: float = 0.5  # of partitions: SYNs vanish instead of being refused
    # A broker cut off from the controller only (it still reaches its peers
    # and clients): the non-transitive partition behind zombie leaders.
    controller_isolations_per_min: float = 1.0
    # walmgr cut off from the controller only: it decides on a stale view
    # of who leads, while it still reaches the brokers.
    walmgr_isolations_per_min: float = 1.0
    controller_crashes_per_min: float = 0.5
    walmgr_crashes_per_min: float = 1.0
    # Share of walmgr's DeleteObjects calls after which it crashes before
    # recording what S3 confirmed (in the middle of a plan).
    walmgr_crashes_mid_plan_share: float = 0.05
    producer_restarts_per_min: float = 1.0  # a new incarnation: a new producer id
    # One open connection reset (what a lost segment does to TCP): the
    # request or its answer is lost, and the client retries (a duplicate).
    connection_resets_per_min: float = 6.0
    # A slow link between two AZs: segments take this much longer for a
    # while (delay, and reordering across connections).
    slow_links_per_min: float = 1.0
    slow_link_extra_ms: tuple[float, float] = (50.0, 1_500.0)
    # One broker's segments to another take this much longer for a while
    # (one direction: a leader's fetch answers to one follower, late past
    # the answer age limit; docs/design/release-grace.md).
    slow_replies_per_min: float = 0.0
    slow_reply_extra_ms: tuple[float, float] = (2_000.0, 6_000.0)
    # A broker's clock jumps to another offset within clock_skew_ms.
    clock_jumps_per_min: float = 1.0
    # DeleteRecords on a partition's current leader, up to a few entries
    # below its HWM (Kafka's AdminClient.deleteRecords, as an operator would).
    delete_records_per_min: float = 2.0
    # retention.bytes set on the topic for a while (as its config would
    # reach every broker): each replica then deletes its oldest batches, and
    # walmgr sees objects leave some replicas' logs before others'.  Then
    # the limit is lifted, so that later records are read back.
    retention_changes_per_min: float = 1.0
    retention_bytes: tuple[int, ...] = (256, 1_024, 4_096)
    retention_s: tuple[float, float] = (1.0, 10.0)
    # A broker loses power: its store runs with sync off (the brokers here
    # do, as partlog broker --no-sync), so what the OS had not yet written
    # back, the transactions of the last power_loss_unsynced_s, is gone.
    # Modelled as whole transactions lost (LMDB's MDB_NOMETASYNC contract).
    power_losses_per_min: float = 1.0
    power_loss_unsynced_s: tuple[float, float] = (0.0, 1.0)
    # CreatePartitions on the topic (an operator's, through the controller):
    # 1-3 partitions more each time, up to GROWN_PARTITIONS_MAX in all; the
    # producers then spread over them and the read-back verifies them.
    # 0 (the default): never, and the run is exactly what it was before.
    create_partitions_per_min: float = 0.0
    # AlterPartitionReassignments on the topic (an operator's, through the
    # controller): a partition moved to a target of the same size (its
    # leader moved away, or one follower), now and then a move in progress
    # cancelled (simulations/dst/reassign.py).  0 (the default): never.
    reassign_per_min: float = 0.0
    # With transactions (Shape.txn_producers > 0) only: the coordinator's
    # host crashes after the first marker of its next decision is written
    # (between Prepare and the markers); the next marker calls are lost
    # (request or answer: the coordinator retries); the leader of a
    # partition of an open transaction crashes; a transformer's process dies.
    txn_coordinator_crashes_per_min: float = 0.0
    txn_marker_losses_per_min: float = 0.0
    txn_leader_crashes_per_min: float = 0.0
    transformer_crashes_per_min: float = 0.0
    clock_skew_ms: int = 400  # per broker, within walmgr's max_clock_skew_ms
    latency_same_az_ms: tuple[float, float] = (0.1, 1.0)
    latency_cross_az_ms: tuple[float, float] = (0.5, 3.0)
    store: StoreFaults = field(
        default_factory=lambda: StoreFaults(
            error_rate=0.01,
            lost_put_rate=0.01,
            list_lag_s=2.0,
            list_miss_rate=0.3,
            latency_s=(0.005, 0.03),
            slow_rate=0.02,
            slow_s=(0.5, 2.5),
        )
    )

    @classmethod
    def none(cls) -> Faults:
        return cls(
            broker_crashes_per_min=0.0,
            az_partitions_per_min=0.0,
            controller_isolations_per_min=0.0,
            walmgr_isolations_per_min=0.0,
            controller_crashes_per_min=0.0,
            walmgr_crashes_per_min=0.0,
            walmgr_crashes_mid_plan_share=0.0,
            producer_restarts_per_min=0.0,
            connection_resets_per_min=0.0,
            slow_links_per_min=0.0,
            clock_jumps_per_min=0.0,
            delete_records_per_min=0.0,
            retention_changes_per_min=0.0,
            power_losses_per_min=0.0,
            clock_skew_ms=0,
            store=StoreFaults(),
        )


@dataclass
class Result:
    """What one run found; ``digest`` is the same for every replay of its seed."""

    seed: int
    violations: list[str]
    events: list[tuple[float, str]]
    simulated_s: float
    wall_s: float
    steps: int
    acked: int
    verified: int
    faults: dict[str, int]
    errors_logged: list[str]
    digest: str
    faults_drawn: int = 0  # fault numbers 0..faults_drawn-1 were drawn
    # acks=1 acknowledgements, and how many of them a failover lost (allowed).
    acked_acks1: int = 0
    lost_acks1: int = 0
    only_faults: frozenset[int] | None = None
    # With Shape.tiering: segments uploaded, swaps on leaders and applied
    # on followers, rows held and entries read through segments at the end.
    tiering: dict[str, int] = field(default_factory=dict)
    busiest_second_steps: int = 0  # runtime.LIVELOCK_STEPS_MAX is the limit

    @property
    def fault_numbers(self) -> list[int]:
        """The faults this run injected (or tried to), by number: what shrinking may drop."""
        return [k for k in range(self.faults_drawn) if self.only_faults is None or k in self.only_faults]

    @property
    def ok(self) -> bool:
        return not self.violations
