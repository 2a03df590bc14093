"""The storage model with tiering on and off, for both designs (issue 31):
the dev-list thread's first concern (files, requests and objects alive),
over a simulated period of steady produce.

Both designs get the same segment rules, the same load and the same
assumptions; they differ only where their designs do:

* **WAL files/s** per design from the aggregate mode (each design's
  routing, the same rotation rule and PUT budget): partlog with AZ
  representatives, the coordinator (KIP-1164) with any-broker routing.
  Which brokers a partition's batches reach (one per AZ, or any of the
  AZ's) sets how many partitions a WAL file holds and how many bytes of
  one partition it holds, so the GETs a segment build or a catch-up read
  needs per WAL object.
* **Garbage collection.** partlog's walmgr lists the bucket (256 shards a
  30 s cycle, every object once an hour) and reads one footer per new WAL
  object; with tiering on it will also list the tiered prefix for its
  segment gate (designed in docs/design/tiered.md, steps 2-4 not built:
  counted here as one listing of every segment object an hour).  The
  coordinator knows its files and KIP-405's RLMM its segments: no LIST, no
  footer read.
* **Metadata kept.** partlog's swap repoints a batch's entry at the
  segment and keeps it (``MetadataStore.swap_to_segment``): one entry per
  batch in retention on every replica, tiering on or off, plus one segment
  row per segment.  The coordinator keeps a row per batch until it is
  tiered (KIP-1163: the leader copies the segment, then the coordinator
  forgets its batches), then KIP-405's per-segment RLMM records; its
  metadata topic has ``metadata_replication_factor`` replicas.
* **Metadata writes.** partlog swaps each segment in on every replica; the
  coordinator design writes KIP-405's four RLMM events and one commit that
  drops the tiered batches, on every replica of its topics.

The same for both (assumptions, stated in the report):

* segments roll as ``partlog/tiered/planner.py`` rolls them: at
  ``segment.bytes`` (capped at the build limit, 64 MiB), at
  ``PLAN_ENTRIES_MAX`` batches, or when the first batch is older than
  ``segment.ms`` at a pass of the builder loop (every
  ``interval_s``); a segment is three objects (``.log``, ``.index``,
  ``.timeindex``: three PUTs) and is deleted by retention with two
  DeleteObjects (the ``.log``, then both indexes);
* one builder loop per broker as ``partlog/broker/tiering.py`` runs it: a
  pass every ``interval_s`` after the last one ends, at most
  ``SEGMENTS_PER_PERIOD_MAX`` segments and ``BYTES_PER_PERIOD_MAX`` bytes,
  ``SEGMENT_BUILDS_IN_FLIGHT_MAX`` segments at a time (each: its GETs in
  parallel, then three PUTs, then the swap).  A broker whose leaders need
  more segments a second than that falls behind, and its WAL files live
  longer every hour;
* leaders spread evenly over brokers, load spread evenly over partitions;
* a WAL object is deleted once every reference to it is gone and it is
  past walmgr's age gate, at the next cycle (the coordinator's cleaner gets
  the same gate and cycle); without tiering its references go when
  retention deletes its batches (checked every
  ``retention_check_s``);
* catch-up reads (``catchup_fraction`` of the produce bytes read again
  from history): from WAL objects one ranged GET per WAL object holding
  the partition, from segments one GET per ``fetch_get_bytes`` and one
  ``.index`` GET per segment;
* a segment build reads its batches by ranged GETs of the WAL objects
  (``build_source = "wal"``, what partlog builds) or from a local log the
  replica already downloaded (``"local-log"``, KIP-1163's leader: no GET).

The produce path's own GETs (replicas reading new WAL files) are the
fan-out model's and do not change with tiering: left out here.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from partlog.broker.server import RETENTION_CHECK_INTERVAL_MS_DEFAULT
from partlog.broker.tiering import (
    BYTES_PER_PERIOD_MAX,
    SEGMENT_BUILDS_IN_FLIGHT_MAX,
    SEGMENT_BYTES_BUILD_MAX,
    SEGMENTS_PER_PERIOD_MAX,
    TIERING_INTERVAL_MS_DEFAULT,
)
from partlog.tiered.planner import PLAN_ENTRIES_MAX
from partlog.tiered.segment import SEGMENT_BYTES_DEFAULT
from simulations.aggregate import aggregate
from simulations.cost import monthly_cost
from simulations.rotation_model import mean_ms
from simulations.scenario import Design, Routing, Scenario
from simulations.storage import (
    DELETE_BATCH,
    LIST_PAGE_KEYS,
    RETENTION_S_DEFAULT,
    WALMGR_CYCLE_S,
    WALMGR_FULL_SCAN_S,
    WALMGR_GATE_S,
    WALMGR_SHARDS,
)

# A segment is three objects (partlog/tiered/remote_storage.py): three PUTs
# to copy, two DeleteObjects to delete (the .log alone, then both indexes).
SEGMENT_OBJECTS = 3
SEGMENT_DELETE_REQUESTS = 2
# The segment.ms the model uses unless told: short enough that WAL objects
# die young (KIP-1163's aim); Kafka's default is 7 days.
SEGMENT_MS_MODEL_DEFAULT = 10 * 60 * 1000
# S3 Standard, us-east-1, first 50 TB: the price of a GB stored a month.
STORAGE_USD_PER_GB_MONTH = 0.023
# One consumer GET of a segment's .log (the target: <= 1 GET per 4 MiB).
FETCH_GET_BYTES = 4 << 20
# Of the bytes produced, the share read again later from history.
CATCHUP_FRACTION_DEFAULT = 0.1
# KIP-1164's __diskless-metadata topic and KIP-405's __remote_log_metadata:
# replicas of the coordinator's rows.
METADATA_REPLICATION_FACTOR = 3
# Metadata writes per segment over its life.  partlog: one swap on every
# replica (retention drops the row with the entries).  The coordinator:
# KIP-405's RLMM events (COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED,
# DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED) and one commit that drops
# the tiered batches, each on every replica of its topic.
PARTLOG_WRITES_PER_SEGMENT = 1
RLMM_EVENTS_PER_SEGMENT = 4
COORDINATOR_WRITES_PER_SEGMENT = RLMM_EVENTS_PER_SEGMENT + 1
# The swap (partlog) or the coordinator's delete of tiered batches: one
# metadata commit, p50 of the measured store.
SWAP_MS = 0.3
# The simulated period: retention plus a day, so that "off" reaches its
# steady state and "on" shows a day of it; samples every SAMPLE_S.
SAMPLE_S = 3600.0
# "Flat": live WAL objects grow by at most this from a day in to the end.
FLAT_FRACTION = 0.01
FLAT_FROM_S = 86_400.0
# The normal quantile of 1 - 1e-6: a segment's fill time that at most one in
# a million takes longer (the worst among a week of segments).
FILL_QUANTILE_Z = 4.75
# WAL objects are counted in cohorts born this far apart.
COHORT_S = 10.0
BYTES_PER_GB = 1e9


class BuildSource(StrEnum):
    # Ranged GETs of the WAL objects (partlog/broker/tiering.py).
    WAL = "wal"
    # The leader's local log, filled by the replica's own downloads (KIP-1163).
    LOCAL_LOG = "local-log"


@dataclass(frozen=True, slots=True)
class TieringConfig:
    """Segment rules and the rest, the same for both designs."""

    tiering: bool = True
    retention_s: float = RETENTION_S_DEFAULT
    segment_ms: int = SEGMENT_MS_MODEL_DEFAULT
    segment_bytes: int = SEGMENT_BYTES_DEFAULT
    interval_s: float = TIERING_INTERVAL_MS_DEFAULT / 1000
    segments_per_pass: int = SEGMENTS_PER_PERIOD_MAX
    builds_in_flight: int = SEGMENT_BUILDS_IN_FLIGHT_MAX
    bytes_per_pass: int = BYTES_PER_PERIOD_MAX
    build_bytes_max: int = SEGMENT_BYTES_BUILD_MAX
    entries_max: int = PLAN_ENTRIES_MAX
    retention_check_s: float = RETENTION_CHECK_INTERVAL_MS_DEFAULT / 1000
    gate_s: float = WALMGR_GATE_S
    cycle_s: float = WALMGR_CYCLE_S
    build_source: BuildSource = BuildSource.WAL
    catchup_fraction: float = CATCHUP_FRACTION_DEFAULT
    fetch_get_bytes: int = FETCH_GET_BYTES
    metadata_replication_factor: int = METADATA_REPLICATION_FACTOR

    def __post_init__(self) -> None:
        if self.retention_s <= 0 or self.segment_ms < 1 or self.segment_bytes < 1 or self.interval_s <= 0:
            raise ValueError("retention, segment.ms, segment.bytes and the interval must be positive")
        if (
            min(
                self.segments_per_pass,
                self.builds_in_flight,
                self.bytes_per_pass,
                self.build_bytes_max,
                self.entries_max,
            )
            < 1
        ):
            raise ValueError("the builder's limits must be positive")
        if not 0 <= self.catchup_fraction <= 1:
            raise ValueError(f"catchup_fraction {self.catchup_fraction}: must be in [0, 1]")


@dataclass(frozen=True, slots=True)
class Load:
    """One design's steady load: what the aggregate mode gives plus the
    shape of the cluster."""

    design: str
    routing: str
    azs: int
    brokers: int
    partitions: int
    replication_factor: int
    produce_bytes_per_s: float
    batches_per_s: float
    wal_files_per_s: float
    # Brokers of one AZ that a partition's batches from that AZ reach.
    spread: int
    put_ms: float
    get_ms: float
    put_bytes_per_s: float
    # Prices (the cost model reads them from a scenario).
    prices: Scenario = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if min(self.azs, self.brokers, self.partitions, self.replication_factor, self.spread) < 1:
            raise ValueError("a load needs AZs, brokers, partitions, a replication factor and a spread >= 1")
        if min(self.produce_bytes_per_s, self.batches_per_s, self.wal_files_per_s) <= 0:
            raise ValueError("a load needs bytes, batches and WAL files a second > 0")


def load_from_scenario(scenario: Scenario, design: Design, routing: Routing, seed: int) -> Load:
    """``design``'s load on ``scenario`` (Poisson producers), WAL files/s
    from the aggregate mode.  The GET latency is taken equal to the PUT's
    (no GET latency in the scenarios)."""
    a = aggregate(scenario, design, routing, seed)
    c = scenario.cluster
    per_az = min(c.brokers_per_az)
    rep = design is Design.PARTLOG and routing is not Routing.ANY_BROKER
    put_ms = mean_ms(scenario.object_store.put)
    return Load(
        design=a.design,
        routing=a.routing,
        azs=len(c.azs),
        brokers=c.brokers,
        partitions=c.partitions,
        replication_factor=c.replication_factor,
        produce_bytes_per_s=a.produce_bytes_per_s,
        batches_per_s=sum(p.count * p.sends_per_s * p.partitions_per_send for p in scenario.producers),
        wal_files_per_s=a.files_per_s,
        spread=1 if rep else per_az,
        put_ms=put_ms,
        get_ms=put_ms,
        put_bytes_per_s=scenario.object_store.put_bytes_per_s,
        prices=scenario,
    )


@dataclass(frozen=True, slots=True)
class Shape:
    """Steady-state quantities both the series and the rates use."""

    # Per partition: batches/s, bytes/s; one segment's bytes and the time
    # from its first batch to its first batch's successor's.
    batch_rate: float
    byte_rate: float
    segment_bytes: float
    segment_cycle_s: float
    # Time from a segment's first batch to its last.
    span_s: float
    # Time from a segment's first batch to its close (a pass after the rule fires).
    close_s_mean: float
    close_s_max: float
    segments_per_s: float
    # The builder, per broker: segments/s needed and possible; one segment's time.
    demand_per_broker: float
    capacity_per_broker: float
    segment_time_s: float
    # After its close, a segment's wait for the pass and its build, mean and max.
    delay_s_mean: float
    delay_s_max: float
    # WAL objects: distinct partitions in one, and bytes of one partition in one.
    partitions_per_file: float
    range_bytes: float


def shape(load: Load, cfg: TieringConfig) -> Shape:
    n = load.partitions
    lam = load.batches_per_s / n
    rate = load.produce_bytes_per_s / n
    batch = load.produce_bytes_per_s / load.batches_per_s
    # Per broker, the batches of one partition from its AZ, against its files.
    files_per_broker = load.wal_files_per_s / load.brokers
    x = lam / load.azs / load.spread / files_per_broker
    hit = -math.expm1(-x)
    per_broker = n * load.spread / (load.brokers / load.azs)
    partitions_per_file = per_broker * hit
    range_bytes = batch * x / hit if hit > 0 else batch
    cap_bytes = float(min(cfg.segment_bytes, cfg.build_bytes_max))
    fill_s = min(cap_bytes / rate, cfg.entries_max / lam)
    by_time = cfg.segment_ms / 1000 < fill_s
    if by_time:
        # Closed at the first pass after its first batch is segment.ms old;
        # the next segment starts at the first batch after segment.ms.
        span = cfg.segment_ms / 1000
        cycle = span + 1 / lam
    else:
        # Rolled by the batch that would overflow it: the next one starts with it.
        span = fill_s
        cycle = span
    seg_bytes = rate * cycle
    seg_rate = n / cycle
    demand = seg_rate / load.brokers
    read_s = load.get_ms / 1000 if cfg.build_source is BuildSource.WAL else 0.0
    seg_time = read_s + SEGMENT_OBJECTS * load.put_ms / 1000 + seg_bytes / load.put_bytes_per_s + SWAP_MS / 1000
    per_pass = min(cfg.segments_per_pass, max(1, math.ceil(cfg.bytes_per_pass / seg_bytes)))
    # A pass builds its segments builds_in_flight at a time.
    c = cfg.builds_in_flight
    rounds = math.ceil(per_pass / c)
    capacity = per_pass / (cfg.interval_s + rounds * seg_time)
    # Segments built in one pass at steady state (a pass every interval + n / c x time).
    used = (
        min(per_pass, demand * cfg.interval_s / max(1e-9, 1 - demand * seg_time / c)) if demand < capacity else per_pass
    )
    # The planner runs at passes: a segment closes at the first pass after
    # its rule fires, and is built in that pass behind the others.
    close_mean = span + (cfg.interval_s + used * seg_time / c) / 2
    close_max = (span if by_time else _fill_max_s(span * lam, lam, cfg.segment_ms / 1000)) + (
        cfg.interval_s + rounds * seg_time
    )
    delay_mean = seg_time * (used / c + 1) / 2
    delay_max = seg_time * rounds
    return Shape(
        batch_rate=lam,
        byte_rate=rate,
        segment_bytes=seg_bytes,
        segment_cycle_s=cycle,
        span_s=span,
        close_s_mean=close_mean,
        close_s_max=close_max,
        segments_per_s=seg_rate,
        demand_per_broker=demand,
        capacity_per_broker=capacity,
        segment_time_s=seg_time,
        delay_s_mean=delay_mean,
        delay_s_max=delay_max,
        partitions_per_file=partitions_per_file,
        range_bytes=range_bytes,
    )


def _fill_max_s(batches: float, lam: float, segment_s: float) -> float:
    """The longest a segment of ``batches`` Poisson arrivals at ``lam`` takes
    to fill, among millions (the gamma's 1 - 1e-6 quantile, Wilson and
    Hilferty's approximation); never past segment.ms (the age rule)."""
    n = max(1.0, batches)
    root = 1 - 1 / (9 * n) + FILL_QUANTILE_Z * math.sqrt(1 / (9 * n))
    return min(segment_s, n / lam * root**3)


@dataclass(frozen=True, slots=True)
class Sample:
    t_s: float
    wal_objects: float
    segment_objects: float
    oldest_wal_s: float
    # How far the builder is behind its partitions' closed segments.
    backlog_s: float


@dataclass(frozen=True, slots=True)
class Rates:
    """Object-store requests a second, by kind, and the bytes they move."""

    wal_puts: float
    segment_puts: float
    build_gets: float
    catchup_gets: float
    footer_gets: float
    lists: float
    wal_deletes: float
    segment_deletes: float
    wal_put_bytes: float
    segment_put_bytes: float
    build_get_bytes: float
    catchup_get_bytes: float

    @property
    def puts(self) -> float:
        return self.wal_puts + self.segment_puts

    @property
    def gets(self) -> float:
        return self.build_gets + self.catchup_gets + self.footer_gets

    @property
    def deletes(self) -> float:
        return self.wal_deletes + self.segment_deletes

    @property
    def total(self) -> float:
        return self.puts + self.gets + self.lists + self.deletes


@dataclass(frozen=True, slots=True)
class TieringRun:
    load: Load
    config: TieringConfig
    shape: Shape
    period_s: float
    samples: tuple[Sample, ...]
    rates: Rates
    wal_objects: float
    segment_objects: float
    oldest_wal_s: float
    bytes_stored: float
    # Metadata kept at the end, on every copy: one per batch, and rows per
    # segment and per WAL object.
    batch_entries: float
    segment_rows: float
    file_rows: float
    # Metadata writes a second tiering adds, on every copy.
    tiering_writes_per_s: float
    request_usd_per_month: float
    storage_usd_per_month: float
    builder_keeps_up: bool
    # Live WAL objects at the end against a day in (0 when none then).
    wal_growth_after_day_one: float

    @property
    def objects(self) -> float:
        return self.wal_objects + self.segment_objects

    @property
    def label(self) -> str:
        return f"{self.load.design} ({self.load.routing})"


def _wal_life(s: Shape, cfg: TieringConfig, backlog_s: float, *, worst: bool) -> float:
    """Seconds from a WAL object's creation to its deletion."""
    # Retention deletes its batches in any case, tiered or not.
    retained = cfg.retention_s + (cfg.retention_check_s if worst else cfg.retention_check_s / 2)
    refs = retained
    if cfg.tiering:
        k = max(1.0, s.partitions_per_file)
        # Its last reference goes when the last of its k partitions' segments
        # is swapped: a batch u seconds into its segment waits close - u, and
        # the latest of k uniform over the span is span / (k + 1) before the
        # close; then the build in that pass.
        tiered = (s.close_s_max if worst else s.close_s_mean - s.span_s / (k + 1)) + (
            s.delay_s_max if worst else s.delay_s_mean
        )
        refs = min(tiered + backlog_s, retained)
    return max(refs, cfg.gate_s) + (cfg.cycle_s if worst else cfg.cycle_s / 2)


def run(
    load: Load,
    cfg: TieringConfig,
    period_s: float | None = None,
    sample_s: float = SAMPLE_S,
    cohort_s: float = COHORT_S,
) -> TieringRun:
    """Steady produce from time 0 over ``period_s`` (default: retention plus
    a day), sampled every ``sample_s``, WAL objects counted in cohorts born
    ``cohort_s`` apart; rates and metadata at the end."""
    period = cfg.retention_s + 86_400.0 if period_s is None else period_s
    if period <= 0 or sample_s <= 0 or cohort_s <= 0:
        raise ValueError("the period, the sample step and the cohort step must be positive")
    s = shape(load, cfg)
    keeps_up = not cfg.tiering or s.demand_per_broker <= s.capacity_per_broker

    def backlog(t: float) -> float:
        """The builder's wait beyond the steady one, for a segment closing at t."""
        if keeps_up:
            return 0.0
        return max(0.0, t - s.close_s_mean) * (s.demand_per_broker / s.capacity_per_broker - 1)

    # WAL objects: cohorts born each step, each with its (mean and worst) life.
    step = min(sample_s, cohort_s)
    births = [i * step for i in range(int(period / step) + 1)]
    f = load.wal_files_per_s
    deaths = sorted(c + _wal_life(s, cfg, backlog(c + s.close_s_mean), worst=False) for c in births)
    worst = [c + _wal_life(s, cfg, backlog(c + s.close_s_max), worst=True) for c in births]

    def wal_alive(t: float) -> float:
        # A cohort stands for the objects born in [c, c + step): none at c.
        born = bisect.bisect_left(births, t)
        dead = bisect.bisect_right(deaths, t)
        return f * step * max(0, born - dead)

    def oldest(t: float) -> float:
        # Worst deaths rise with birth (a backlog only grows): the first alive.
        i = bisect.bisect_right(worst, t)
        return t - births[i] if i < len(births) and births[i] <= t else 0.0

    def segments_alive(t: float) -> float:
        if not cfg.tiering:
            return 0.0
        # Built from their close (a pass later, behind any backlog), deleted by
        # retention measured from their last batch, at a retention check.
        rate = s.segments_per_s if keeps_up else s.capacity_per_broker * load.brokers
        start = s.close_s_mean + s.delay_s_mean
        built = rate * max(0.0, t - start)
        deleted = rate * max(0.0, t - (s.span_s + cfg.retention_s + cfg.retention_check_s / 2))
        return SEGMENT_OBJECTS * max(0.0, built - deleted)

    samples = tuple(
        Sample(t, wal_alive(t), segments_alive(t), oldest(t), backlog(t))
        for t in (i * sample_s for i in range(int(period / sample_s) + 1))
    )
    end = samples[-1].t_s
    wal_end, seg_end = wal_alive(end), segments_alive(end)
    day_one = wal_alive(min(end, FLAT_FROM_S))
    rates = _rates(load, cfg, s, wal_end, seg_end, keeps_up)
    # S3 prices a LIST as a PUT and a DELETE not at all.
    o = monthly_cost(load.prices, rates.puts + rates.lists, rates.gets, 0.0).total_usd
    bytes_stored = _bytes_stored(load, s, wal_end, seg_end)
    batches_kept = load.batches_per_s * min(end, cfg.retention_s + cfg.retention_check_s / 2)
    # A batch's mean wait to be tiered: to its segment's close, then the build.
    untiered_s = min(end, s.close_s_mean - s.span_s / 2 + s.delay_s_mean)
    if load.design == Design.PARTLOG.value:
        # Every replica keeps an entry per batch, tiered or not, and a row per segment.
        batch_entries = batches_kept * load.replication_factor
        segment_rows = seg_end / SEGMENT_OBJECTS * load.replication_factor
        # walmgr's registry, and the file index of every broker holding a
        # replica of one of the object's partitions.
        miss = (1.0 - min(1.0, load.replication_factor / load.brokers)) ** s.partitions_per_file
        holders = load.brokers * (1.0 - miss)
        file_rows = wal_end * (1 + holders)
        writes = PARTLOG_WRITES_PER_SEGMENT * load.replication_factor
    else:
        # Until tiered, and never past retention.
        kept = min(batches_kept, load.batches_per_s * (untiered_s + backlog(end))) if cfg.tiering else batches_kept
        batch_entries = kept * cfg.metadata_replication_factor
        segment_rows = seg_end / SEGMENT_OBJECTS * cfg.metadata_replication_factor
        file_rows = wal_end * cfg.metadata_replication_factor
        writes = COORDINATOR_WRITES_PER_SEGMENT * cfg.metadata_replication_factor
    return TieringRun(
        load=load,
        config=cfg,
        shape=s,
        period_s=end,
        samples=samples,
        rates=rates,
        wal_objects=wal_end,
        segment_objects=seg_end,
        oldest_wal_s=oldest(end),
        bytes_stored=bytes_stored,
        batch_entries=batch_entries,
        segment_rows=segment_rows,
        file_rows=file_rows,
        tiering_writes_per_s=writes * rates.segment_puts / SEGMENT_OBJECTS,
        request_usd_per_month=o,
        storage_usd_per_month=bytes_stored / BYTES_PER_GB * STORAGE_USD_PER_GB_MONTH,
        builder_keeps_up=keeps_up,
        wal_growth_after_day_one=(wal_end - day_one) / day_one if day_one else 0.0,
    )


def _rates(load: Load, cfg: TieringConfig, s: Shape, wal_alive: float, seg_alive: float, keeps_up: bool) -> Rates:
    f = load.wal_files_per_s
    catchup = cfg.catchup_fraction * load.produce_bytes_per_s
    partlog = load.design == Design.PARTLOG.value
    lists = 0.0
    if partlog:
        lists = WALMGR_SHARDS / WALMGR_CYCLE_S + (wal_alive / LIST_PAGE_KEYS + WALMGR_SHARDS) / WALMGR_FULL_SCAN_S
    if not cfg.tiering:
        return Rates(
            wal_puts=f,
            segment_puts=0.0,
            build_gets=0.0,
            catchup_gets=catchup / s.range_bytes,
            footer_gets=f if partlog else 0.0,
            lists=lists,
            wal_deletes=f / DELETE_BATCH,
            segment_deletes=0.0,
            wal_put_bytes=load.produce_bytes_per_s,
            segment_put_bytes=0.0,
            build_get_bytes=0.0,
            catchup_get_bytes=catchup,
        )
    built = s.segments_per_s if keeps_up else s.capacity_per_broker * load.brokers
    built_bytes = built * s.segment_bytes
    if partlog:
        # The segment gate (designed): every segment object listed once an hour.
        lists += (seg_alive / LIST_PAGE_KEYS + WALMGR_SHARDS) / WALMGR_FULL_SCAN_S
    from_wal = cfg.build_source is BuildSource.WAL
    seg_get = min(float(cfg.fetch_get_bytes), s.segment_bytes)
    return Rates(
        wal_puts=f,
        segment_puts=SEGMENT_OBJECTS * built,
        build_gets=built_bytes / s.range_bytes if from_wal else 0.0,
        catchup_gets=catchup / seg_get + catchup / s.segment_bytes,
        footer_gets=f if partlog else 0.0,
        lists=lists,
        wal_deletes=f / DELETE_BATCH,
        segment_deletes=SEGMENT_DELETE_REQUESTS * built,
        wal_put_bytes=load.produce_bytes_per_s,
        segment_put_bytes=built_bytes,
        build_get_bytes=built_bytes if from_wal else 0.0,
        catchup_get_bytes=catchup,
    )


def _bytes_stored(load: Load, s: Shape, wal_alive: float, seg_alive: float) -> float:
    """A WAL object holds all its bytes until it is deleted; a segment its own."""
    file_bytes = load.produce_bytes_per_s / load.wal_files_per_s
    return wal_alive * file_bytes + seg_alive / SEGMENT_OBJECTS * s.segment_bytes


def sweep(
    scenario_for: Sequence[tuple[int, Scenario]],
    cfg: TieringConfig,
    seed: int,
    period_s: float | None = None,
    sources: Sequence[BuildSource] = (BuildSource.WAL,),
) -> list[tuple[int, list[TieringRun]]]:
    """For each (partitions, scenario): both designs (partlog with AZ
    representatives, the coordinator with any-broker routing), tiering off,
    then on with each build source, the same config otherwise."""
    out = []
    for n, sc in scenario_for:
        runs = []
        for design, routing in ((Design.PARTLOG, Routing.AZ_REPRESENTATIVE), (Design.COORDINATOR, Routing.ANY_BROKER)):
            load = load_from_scenario(sc, design, routing, seed)
            runs.append(run(load, replace(cfg, tiering=False), period_s))
            runs += [run(load, replace(cfg, tiering=True, build_source=b), period_s) for b in sources]
        out.append((n, runs))
    return out
