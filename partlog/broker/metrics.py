"""Prometheus metrics of one broker (prometheus-client), in a registry of
its own so that several brokers can live in one process (tests, ``partlog
cluster``).  ``serve(port)`` exposes them over HTTP on 127.0.0.1.

:class:`BrokerMetrics` is the broker's one recorder: each event is recorded
once, by one of its methods (``produce_received``, ``upload_finished``, ...).
The counts live in the Prometheus metrics; the latency and fan-out samples
that reports need as values (percentiles, means) are kept beside them, the
newest ``STATS_SAMPLES_MAX``.  :class:`BrokerStats` reads both: it is a view,
not a second recorder.

The produce path's stages (issue 30) are one histogram,
``partlog_produce_stage_seconds{stage}``: one family with a ``stage`` label
rather than one per stage, so that a single query gives the whole table
(``histogram_quantile(0.5, sum by (stage, le) (rate(..._bucket[1m])))``) and
every stage shares one set of buckets, as ``partlog_upload_seconds`` and
``partlog_commit_seconds`` are named (seconds, Prometheus' base unit).
The stages are :data:`PRODUCE_STAGES`; docs/operating.md says where each
starts and ends.  Always on, so kept cheap: a bucket count and a sum in
plain lists, written by the event loop's thread only and turned into the
histogram when scraped (:class:`_StageCollector`); prometheus-client's own
``Histogram.observe`` takes a lock per bucket step and cost ~1 us, this
costs a bisect (``partlog bench latency`` measures it).
"""

from __future__ import annotations

import bisect
import functools
import threading
from collections import deque
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from partlog.limits import ABORTED_TXNS_PER_FETCH_MAX
from partlog.util import gc_pauses

# Seconds: object-store PUTs are ~100 ms at p50, up to 400 ms at p99
# (KIP-1163); commits are milliseconds.
_UPLOAD_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4)
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
# Seconds, 0.1 ms .. 5 s: fine where issue 30's targets are (3, 10, 15, 40,
# 90 ms), so that a quantile interpolated within a bucket is close.
STAGE_BUCKETS = tuple(
    ms / 1000
    for ms in (0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 40, 50, 75, 90, 100, 150, 200, 300,
               500, 1000, 2000, 5000)
)  # fmt: skip
# The produce path's stages, in path order (the ``stage`` label):
# on the broker that took the produce request: queue (accepted -> batches in
# an open file), file_open (first batch -> file closed), upload (the PUT),
# commit_rpc (a commit sent -> its leader answered, one per leader), reply
# (the last batch answered -> the produce call returns), answer (accepted ->
# returns: the broker's answer in all); on the leader: leader_commit (commit
# received -> appended, durable) and replication (appended -> HWM passed,
# acks=all commits only).
PRODUCE_STAGES = ("queue", "file_open", "upload", "commit_rpc", "leader_commit", "replication", "reply", "answer")
# Samples kept for reports (latency percentiles, fan-out per file); older
# ones are dropped, Prometheus histograms keep the totals.
STATS_SAMPLES_MAX = 100_000


class BrokerMetrics:
    def __init__(
        self,
        broker_id: int,
        inflight_bytes: Callable[[], float],
        inflight_bytes_max: int,
        uploads_inflight: Callable[[], float],
        uploads_inflight_max: int,
        uploads_waiting: Callable[[], float],
    ) -> None:
        self._http: WSGIServer | None = None
        self._http_thread: threading.Thread | None = None
        self.registry = CollectorRegistry()
        r = self.registry
        self.uploads = Counter("partlog_uploads", "WAL segments uploaded (attempts)", registry=r)
        self.upload_errors = Counter("partlog_upload_errors", "WAL segment uploads that failed", registry=r)
        self.upload_bytes = Counter("partlog_upload_bytes", "bytes of WAL segments uploaded", registry=r)
        self.upload_seconds = Histogram(
            "partlog_upload_seconds", "WAL segment upload latency", buckets=_UPLOAD_BUCKETS, registry=r
        )
        self.commits = Counter("partlog_commits", "commit RPCs sent, by where the leader is", ["where"], registry=r)
        self.commit_errors = Counter("partlog_commit_errors", "commit RPCs that failed", registry=r)
        self.fetch_corrupt = Counter(
            "partlog_fetch_corrupt_batches",
            "partition answers of fetches cut at a corrupt or truncated WAL object (CORRUPT_MESSAGE)",
            registry=r,
        )
        self.store_reopens = Counter(
            "partlog_store_reopens", "metadata store reopened after a failed commit (fail-stop)", registry=r
        )
        self.commit_seconds = Histogram(
            "partlog_commit_seconds", "commit RPC latency", buckets=_COMMIT_BUCKETS, registry=r
        )
        self.wal_files_committed = Counter(
            "partlog_wal_files_committed", "WAL files whose commits were sent (divide commits by it)", registry=r
        )
        self._stages = _StageCollector()
        r.register(self._stages)
        self.commits_served = Counter("partlog_commits_served", "commit RPCs served as a leader", registry=r)
        self.commits_started = Counter(
            "partlog_commits_started",
            "commits started by this broker's senders, to its own store (local) or another leader (remote)",
            ["leader"],
            registry=r,
        )
        self.produce_requests = Counter("partlog_produce_requests", "produce requests received", registry=r)
        self.wal_early_closes = Counter(
            "partlog_wal_early_closes",
            "WAL files closed before their commit interval by a coordinator's record (urgent produce)",
            registry=r,
        )
        self.wal_puts = Counter(
            "partlog_wal_puts",
            "WAL files closed and put to the object store, by why they closed: idle, round_done (early, "
            "within wal_puts_per_s_max), interval, size, urgent, flush",
            ["reason"],
            registry=r,
        )
        self.wal_budget_waits = Counter(
            "partlog_wal_budget_waits",
            "WAL files due to close early that waited for the PUT budget (a token or their interval)",
            registry=r,
        )
        self.produce_bytes = Counter("partlog_produce_bytes", "batch bytes received in produce requests", registry=r)
        self.retention_runs = Counter("partlog_retention_runs", "retention passes over the led partitions", registry=r)
        self.fetches = Counter("partlog_fetches", "fetch requests served", registry=r)
        # The builder loop (partlog.broker.tiering).
        self.tiered_segments = Counter("partlog_tiered_segments", "tiered segments uploaded", registry=r)
        self.tiered_upload_errors = Counter(
            "partlog_tiered_upload_errors", "tiered segment uploads that failed", registry=r
        )
        self.tiered_read_errors = Counter(
            "partlog_tiered_read_errors", "tiered segments not built: their batches could not be read", registry=r
        )
        self.tiered_swaps = Counter(
            "partlog_tiered_swaps", "reference swaps of uploaded segments, by outcome", ["outcome"], registry=r
        )
        self.tiered_pass_errors = Counter(
            "partlog_tiered_pass_errors", "builder-loop passes that failed unexpectedly", registry=r
        )
        self.tiered_bytes = Counter("partlog_tiered_bytes", "batch bytes moved into tiered segments", registry=r)
        self.cleaner_runs = Counter("partlog_cleaner_runs", "log cleaner passes started (compacted topics)", registry=r)
        self.cleaner_errors = Counter(
            "partlog_cleaner_errors", "log cleaner passes ended by a failure (read, batch, upload, swap)", registry=r
        )
        self.cleaner_bytes_read = Counter("partlog_cleaner_bytes_read", "segment bytes the cleaner read", registry=r)
        self.cleaner_bytes_written = Counter(
            "partlog_cleaner_bytes_written", "bytes of cleaned segments swapped in", registry=r
        )
        self.cleaner_records_removed = Counter(
            "partlog_cleaner_records_removed", "records removed by cleaned segments swapped in", registry=r
        )
        self.txn_markers = Counter(
            "partlog_txn_markers", "transaction markers asked of this broker as a leader, by answer", ["error"],
            registry=r,
        )  # fmt: skip
        self.txn_verifications = Counter(
            "partlog_txn_verifications", "KIP-890 verifications this leader asked of a coordinator, by answer",
            ["error"], registry=r,
        )  # fmt: skip
        self.rpc_authorization_failures = Counter(
            "partlog_rpc_authorization_failures",
            "broker RPC requests refused CLUSTER_AUTHORIZATION_FAILED (the authorizer is on), by method",
            ["method"], registry=r,
        )  # fmt: skip
        self.fetch_gets = Counter("partlog_fetch_gets", "object-store GETs made for fetches", registry=r)
        self.fetch_cache_hits = Counter("partlog_fetch_cache_hits", "fetch reads answered by the cache", registry=r)
        self.fetch_finds_inline = Counter(
            "partlog_fetch_finds_inline",
            "fetches whose batches were found on the event loop (FETCH_FIND_INLINE_BATCHES_MAX), not a worker thread",
            registry=r,
        )
        inflight = Gauge("partlog_inflight_bytes", "produce bytes accepted and not yet answered", registry=r)
        inflight.set_function(inflight_bytes)
        Gauge("partlog_inflight_bytes_max", "limit of partlog_inflight_bytes", registry=r).set(inflight_bytes_max)
        Gauge("partlog_broker_id", "this broker's id", registry=r).set(broker_id)
        Gauge(
            "partlog_aborted_txns_per_fetch_max", "limit of aborted transactions in one partition's fetch answer",
            registry=r,
        ).set(ABORTED_TXNS_PER_FETCH_MAX)  # fmt: skip
        # The process's garbage-collector pauses (partlog.util.gc_pauses;
        # zero unless the CLI installed the freezer).
        for name, what, attr in (
            ("partlog_gc_full_collections", "full garbage collections in this process", "full_collections"),
            ("partlog_gc_full_collection_longest_ms", "the longest of them (ms)", "longest_full_ms"),
            ("partlog_gc_freezes", "full collections over GC_FULL_PAUSE_FREEZE_MS that froze survivors", "freezes"),
            (
                "partlog_gc_full_pause_freeze_ms",
                "limit: longer full collections freeze",
                "freeze_ms",
            ),
        ):
            Gauge(name, what, registry=r).set_function(functools.partial(_gc_stat, attr))
        up = Gauge("partlog_uploads_inflight", "WAL segment uploads running", registry=r)
        up.set_function(uploads_inflight)
        Gauge("partlog_uploads_inflight_max", "limit of partlog_uploads_inflight", registry=r).set(uploads_inflight_max)
        waiting = Gauge("partlog_uploads_waiting", "closed segments waiting for an upload slot", registry=r)
        waiting.set_function(uploads_waiting)
        self.cache_bytes = Gauge("partlog_fetch_cache_bytes", "bytes held by the fetch cache", registry=r)
        self.cache_bytes_max = Gauge("partlog_fetch_cache_bytes_max", "limit of partlog_fetch_cache_bytes", registry=r)
        # Local copies of recent tiered segments (partlog.broker.local_segments).
        self.local_segment_bytes = Gauge(
            "partlog_local_segment_bytes", "bytes of tiered segments held on this broker's disk", registry=r
        )
        self.local_segment_hits = Counter(
            "partlog_local_segment_hits", "fetch reads answered from a local segment copy", registry=r
        )
        self.local_segment_downloads = Counter(
            "partlog_local_segment_downloads", "tiered segments copied to this broker's disk", registry=r
        )
        self.local_segment_download_errors = Counter(
            "partlog_local_segment_download_errors", "local segment copies that failed (retried)", registry=r
        )
        # Calls to the cluster metadata (the controller) that failed; the
        # broker keeps retrying them, so a count is what shows it.
        self.metadata_errors = Gauge(
            "partlog_metadata_errors", "calls to the controller that failed (retried)", registry=r
        )
        # Samples, newest last: upload and commit latencies (ms) and, per WAL
        # file, its commits (local, same-AZ remote, cross-AZ remote).
        self.upload_ms: deque[float] = deque(maxlen=STATS_SAMPLES_MAX)
        self.commit_ms: deque[float] = deque(maxlen=STATS_SAMPLES_MAX)
        self.fanout: deque[tuple[int, int, int]] = deque(maxlen=STATS_SAMPLES_MAX)

    # ------------------------------------------------------------ recording

    def produce_received(self, nbytes: int) -> None:
        self.produce_requests.inc()
        self.produce_bytes.inc(nbytes)

    def wal_closed_early(self) -> None:
        self.wal_early_closes.inc()

    def wal_put(self, reason: str) -> None:
        self.wal_puts.labels(reason).inc()

    def wal_budget_waited(self, files: int) -> None:
        self.wal_budget_waits.inc(files)

    def upload_finished(self, seconds: float, nbytes: int, ok: bool) -> None:
        """One WAL segment upload (attempt) took ``seconds``."""
        if ok:
            self.upload_bytes.inc(nbytes)
            # The stages are of the answered path; failures are counted.
            self._stages.observe("upload", seconds)
        else:
            self.upload_errors.inc()
        self.uploads.inc()
        self.upload_seconds.observe(seconds)
        self.upload_ms.append(seconds * 1000)

    def file_fanned_out(self, local: int, same_az: int, cross_az: int) -> None:
        """One WAL file's commits were released, this many to each kind of leader."""
        self.fanout.append((local, same_az, cross_az))
        self.wal_files_committed.inc()
        for where, n in (("local", local), ("same_az", same_az), ("cross_az", cross_az)):
            if n:
                self.commits.labels(where).inc(n)

    def stage(self, stage: str, seconds: float) -> None:
        """One pass through ``stage`` (of :data:`PRODUCE_STAGES`) took ``seconds``."""
        self._stages.observe(stage, seconds)

    def commit_started(self, local: bool) -> None:
        self.commits_started.labels("local" if local else "remote").inc()

    def commit_finished(self, seconds: float, ok: bool) -> None:
        """A commit this broker sent was answered (or failed) after ``seconds``."""
        if ok:
            self._stages.observe("commit_rpc", seconds)
        else:
            self.commit_errors.inc()
        self.commit_seconds.observe(seconds)
        self.commit_ms.append(seconds * 1000)

    def watch_replication(
        self, stats: Callable[[], object], leaders: Callable[[], int], under_replicated: Callable[[], int]
    ) -> None:
        """Expose the replication counters (``ReplicationStats``, read at
        scrape time) and two gauges: partitions led, and led partitions whose
        ISR is smaller than their replica set (Kafka's UnderReplicatedPartitions)."""
        self.registry.register(_ReplicationCollector(stats, leaders, under_replicated))

    def watch_store(self, stats: Callable[[], dict[str, int]]) -> None:
        """Expose the metadata store's counters (``MetadataStore.store_stats``,
        read at scrape time): group commits, journal, checkpoints, overlay."""
        self.registry.register(_StatsCollector(stats))

    def watch_metadata_session(self, stats: Callable[[], dict[str, float]]) -> None:
        """Expose an etcd metadata session's counters (``EtcdMetadata.session_stats``,
        read at scrape time): registrations, lease keep-alives and their retries."""
        self.registry.register(_StatsCollector(stats, _SESSION_METRICS))

    def watch_dynamic_configs(self, stats: Callable[[], dict[str, int]]) -> None:
        """Expose the cluster's dynamic configs as this broker holds them
        (``Broker.follow_dynamic_configs``, read at scrape time)."""
        self.registry.register(_StatsCollector(stats, _DYNAMIC_CONFIG_METRICS))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Expose the metrics at http://host:port/metrics (a daemon thread)
        until :meth:`close`."""
        self._http, self._http_thread = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            if self._http_thread is not None:
                self._http_thread.join(5)
            self._http = self._http_thread = None


def _gc_stat(attr: str) -> float:
    freezer = gc_pauses.installed()
    return 0.0 if freezer is None else float(getattr(freezer, attr))


class _StageCollector(Collector):
    """``partlog_produce_stage_seconds{stage}``: per stage, observations per
    bucket (non-cumulative, the last past every bound) and their sum."""

    def __init__(self) -> None:
        self._counts = {stage: [0] * (len(STAGE_BUCKETS) + 1) for stage in PRODUCE_STAGES}
        self._sums = dict.fromkeys(PRODUCE_STAGES, 0.0)

    def observe(self, stage: str, seconds: float) -> None:
        self._counts[stage][bisect.bisect_left(STAGE_BUCKETS, seconds)] += 1
        self._sums[stage] += seconds

    def collect(self):  # type: ignore[no-untyped-def]  # prometheus-client's own signature
        family = HistogramMetricFamily(
            "partlog_produce_stage_seconds",
            "produce path latency by stage: queue, file_open, upload, commit_rpc, leader_commit, replication "
            "(acks=all), reply, answer (the broker's answer in all); see docs/operating.md",
            labels=["stage"],
        )
        bounds = [*(f"{b:g}" for b in STAGE_BUCKETS), "+Inf"]
        for stage in PRODUCE_STAGES:
            counts = list(self._counts[stage])  # a copy: the loop's thread keeps writing
            cumulative, total = [], 0
            for bound, n in zip(bounds, counts, strict=True):
                total += n
                cumulative.append((bound, float(total)))
            family.add_metric([stage], cumulative, self._sums[stage])
        yield family


def _count(counter: Counter, **labels: str) -> int:
    """A counter's value now (of the child with ``labels``)."""
    for metric in counter.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels == labels:
                return int(sample.value)
    return 0


class BrokerStats:
    """What reports and tests read of one broker, read from its recorder
    (:class:`BrokerMetrics`) when asked."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._m = metrics

    @property
    def produce_requests(self) -> int:
        return _count(self._m.produce_requests)

    @property
    def produce_bytes(self) -> int:
        return _count(self._m.produce_bytes)

    @property
    def uploads(self) -> int:
        return _count(self._m.uploads)

    @property
    def upload_errors(self) -> int:
        return _count(self._m.upload_errors)

    @property
    def commits_local(self) -> int:
        return _count(self._m.commits_started, leader="local")

    @property
    def commits_remote(self) -> int:
        return _count(self._m.commits_started, leader="remote")

    @property
    def commit_errors(self) -> int:
        return _count(self._m.commit_errors)

    @property
    def commits_served(self) -> int:
        return _count(self._m.commits_served)

    @property
    def fetches(self) -> int:
        return _count(self._m.fetches)

    @property
    def fetch_gets(self) -> int:
        return _count(self._m.fetch_gets)

    @property
    def upload_ms(self) -> deque[float]:
        return self._m.upload_ms

    @property
    def commit_ms(self) -> deque[float]:
        return self._m.commit_ms

    @property
    def fanout(self) -> deque[tuple[int, int, int]]:
        """Per WAL file: (local, same-AZ remote, cross-AZ remote) commits."""
        return self._m.fanout


# ReplicationStats field -> (metric name, help).
_REPLICATION_COUNTERS = {
    "became_leader": ("partlog_replication_became_leader", "partitions this broker took the leadership of"),
    "became_follower": ("partlog_replication_became_follower", "partitions this broker started following"),
    "truncations": ("partlog_replication_truncations", "divergent suffixes truncated as a follower"),
    "entries_truncated": ("partlog_replication_entries_truncated", "metadata-log entries removed by truncation"),
    "entries_replicated": ("partlog_replication_entries_replicated", "entries appended as a follower"),
    "replica_fetches_served": ("partlog_replication_fetches_served", "replica fetches served as a leader"),
    "replica_fetches_parked": ("partlog_replication_fetches_parked", "replica fetches parked with nothing to send"),
    "replica_fetch_wakeups": (
        "partlog_replication_fetch_wakeups",
        "parked replica fetches woken by an append or HWM move, then served again",
    ),
    "replica_partitions_served": (
        "partlog_replication_partitions_served",
        "partitions served in replica fetches as a leader (read, or answered unchanged; not the quiet lane's)",
    ),
    "replica_partitions_served_again": (
        "partlog_replication_partitions_served_again",
        "of those, partitions read again by a parked replica fetch that an append or HWM move woke",
    ),
    "replica_partitions_unchanged": (
        "partlog_replication_partitions_unchanged",
        "partitions of replica fetches answered as last time, nothing having moved: no store read",
    ),
    "replica_partitions_quiet": (
        "partlog_replication_partitions_quiet",
        "session partitions of replica fetches answered in the quiet lane as a leader: the last answer, no "
        "serve, only the follower's fetch times moved",
    ),
    "replica_rows_omitted": (
        "partlog_replication_answer_rows_omitted",
        "partitions left out of sparse replica fetch answers as a leader (nothing there for the follower)",
    ),
    "replica_sessions_reset": (
        "partlog_replication_sessions_reset",
        "replica fetch sessions refused or lost by their leader, as a follower (a full fetch opens another)",
    ),
    "replica_sessions_opened": ("partlog_replication_sessions_opened", "replica fetch sessions opened as a leader"),
    "replica_sessions_refused": (
        "partlog_replication_sessions_refused",
        "replica fetches refused for their session (unknown id, wrong epoch, invalid) as a leader",
    ),
    "replica_sessions_evicted": (
        "partlog_replication_sessions_evicted",
        "idle replica fetch sessions evicted for a new one past REPLICA_FETCH_SESSIONS_MAX (256) or "
        "REPLICA_FETCH_SESSION_ITEMS_MAX (400,000 partitions), as a leader",
    ),
    "replica_fetches_sessionless": (
        "partlog_replication_fetches_sessionless",
        "full replica fetches served without a session (none fit those bounds), as a leader",
    ),
    "replica_fetches_incremental": (
        "partlog_replication_fetches_incremental",
        "replica fetches naming only what changed in their session, as a leader",
    ),
    "replica_items_not_sent": (
        "partlog_replication_items_not_sent",
        "partitions of sessions served from the session's copy (not in the request), as a leader",
    ),
    "replica_fetches_sent": ("partlog_replication_fetches_sent", "replica fetches sent as a follower"),
    "replica_fetch_errors": ("partlog_replication_fetch_errors", "replica fetches that failed (connection, refusal)"),
    "replica_answers_stale": (
        "partlog_replication_answers_stale",
        "fetch answers dropped as older than replica_answer_age_max_ms when they would be applied",
    ),
    "isr_shrinks": ("partlog_replication_isr_shrinks", "ISR shrinks committed by the controller"),
    "isr_expands": ("partlog_replication_isr_expands", "ISR expansions committed by the controller"),
    "alter_partition_failures": ("partlog_replication_alter_partition_failures", "ISR changes refused or unanswered"),
    "acks_all_failed": ("partlog_replication_acks_all_failed", "acks=all batches appended but not acknowledged"),
    "segment_swaps_sent": ("partlog_replication_segment_swaps_sent", "segment rows sent to followers as a leader"),
    "segment_swaps_applied": ("partlog_replication_segment_swaps_applied", "leaders' segment swaps applied"),
    "segment_swaps_failed": ("partlog_replication_segment_swaps_failed", "leaders' segment swaps refused here"),
    "segment_rewrites_sent": ("partlog_replication_segment_rewrites_sent", "rows sent for a follower to take over"),
    "segment_rewrites_applied": ("partlog_replication_segment_rewrites_applied", "leaders' rows taken over here"),
    "segment_rewrites_failed": ("partlog_replication_segment_rewrites_failed", "leaders' rows refused here"),
    "partitions_dropped": (
        "partlog_replication_partitions_dropped",
        "logs dropped of partitions this broker no longer replicates",
    ),
}


class _ReplicationCollector(Collector):
    def __init__(
        self, stats: Callable[[], object], leaders: Callable[[], int], under_replicated: Callable[[], int]
    ) -> None:
        self._stats = stats
        self._leaders = leaders
        self._under = under_replicated

    def collect(self):  # type: ignore[no-untyped-def]  # prometheus-client's own signature
        st = self._stats()
        for attr, (name, doc) in _REPLICATION_COUNTERS.items():
            c = CounterMetricFamily(name, doc)
            c.add_metric([], float(getattr(st, attr)))
            yield c
        yield GaugeMetricFamily("partlog_partitions_led", "partitions this broker leads", value=self._leaders())
        yield GaugeMetricFamily(
            "partlog_under_replicated_partitions",
            "led partitions whose ISR is smaller than their replica set",
            value=self._under(),
        )


# MetadataStore.store_stats key -> (metric name, help, counter?).
_STORE_METRICS = {
    "group_commits": ("partlog_store_group_commits", "group commits made durable (journal appends)", True),
    "journal_bytes": ("partlog_store_journal_bytes", "bytes appended to the journal", True),
    "checkpoints": ("partlog_store_checkpoints", "checkpoints: journal groups applied to LMDB", True),
    "checkpointed_groups": ("partlog_store_checkpointed_groups", "groups applied to LMDB by checkpoints", True),
    "map_resizes": ("partlog_store_map_resizes", "LMDB map doublings", True),
    "replayed_groups": ("partlog_store_replayed_groups", "journal groups replayed at the last open", False),
    "overlay_groups": ("partlog_store_overlay_groups", "durable groups not yet applied to LMDB", False),
    "checkpoint_groups_max": (
        "partlog_store_checkpoint_groups_max",
        "limit of partlog_store_overlay_groups before a checkpoint",
        False,
    ),
    "checkpoint_backlog_groups_max": (
        "partlog_store_checkpoint_backlog_groups_max",
        "limit of partlog_store_overlay_groups before commits wait for the checkpoint",
        False,
    ),
    "aborted_ranges_cut": (
        "partlog_store_aborted_ranges_cut",
        "READ_COMMITTED reads whose range was cut to list at most partlog_aborted_txns_per_fetch_max aborts",
        True,
    ),
    "release_grace_keys": (
        "partlog_store_release_grace_keys",
        "object keys released or held within the release grace (limit partlog_store_release_grace_keys_max)",
        False,
    ),
    "release_grace_keys_max": (
        "partlog_store_release_grace_keys_max",
        "released keys remembered before every key counts for a grace (a blanket)",
        False,
    ),
    "release_grace_blankets": (
        "partlog_store_release_grace_blankets",
        "blanket graces begun (store opens, and overflows of partlog_store_release_grace_keys_max)",
        True,
    ),
    "checkpoint_backpressure": (
        "partlog_store_checkpoint_backpressure",
        "group commits that applied the checkpoint backlog themselves (the thread fell behind)",
        True,
    ),
}


class _StatsCollector(Collector):
    """Counters and gauges read from one ``stats()`` dict at scrape time."""

    def __init__(
        self, stats: Callable[[], dict[str, int]] | Callable[[], dict[str, float]],
        metrics: dict[str, tuple[str, str, bool]] | None = None,
    ) -> None:  # fmt: skip
        self._stats = stats
        self._metrics = _STORE_METRICS if metrics is None else metrics

    def collect(self):  # type: ignore[no-untyped-def]  # prometheus-client's own signature
        st = self._stats()
        for key, (name, doc, counter) in self._metrics.items():
            family = CounterMetricFamily(name, doc) if counter else GaugeMetricFamily(name, doc)
            family.add_metric([], float(st.get(key, 0)))
            yield family


# An etcd metadata session's counters (partlog.controller.etcd_session):
# key -> (metric, help, is a counter).
_SESSION_METRICS: dict[str, tuple[str, str, bool]] = {
    "registrations": ("partlog_etcd_registrations", "incarnations this broker registered in etcd", True),
    "duplicate_waits": (
        "partlog_etcd_duplicate_waits",
        "registrations refused because another session held the broker id",
        True,
    ),
    "keepalives": ("partlog_etcd_keepalives", "lease keep-alives etcd answered", True),
    "keepalive_retries": (
        "partlog_etcd_keepalive_retries",
        "keep-alives without a usable answer (timed out, failed, refuted), retried",
        True,
    ),
    "keepalive_refuted": (
        "partlog_etcd_keepalive_refuted",
        "keep-alives answered 'no TTL' while LeaseTimeToLive still had one",
        True,
    ),
    "keepalive_gap_s_max": (
        "partlog_etcd_keepalive_gap_seconds_max",
        "the longest time between two renewals of this broker's lease",
        False,
    ),
}


# The dynamic BROKER and GROUP configs this broker follows (partlog.kafka.dynamic_config).
_DYNAMIC_CONFIG_METRICS: dict[str, tuple[str, str, bool]] = {
    "resources": (
        "partlog_dynamic_config_resources",
        "resources with dynamic configs held (at most DYNAMIC_RESOURCES_MAX)",
        False,
    ),
    "refused": ("partlog_dynamic_config_refused", "kept values refused on reading (the defaults hold instead)", True),
    "failures": ("partlog_dynamic_config_failures", "reads of the dynamic configs from etcd that failed", True),
}
