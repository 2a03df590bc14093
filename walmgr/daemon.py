"""The walmgr daemon: the asyncio shell around the scanner, the decision
core and the deleter.

One cycle (``Walmgr.cycle``):

1. learn objects: notifications (always on, best effort), an incremental
   scan per shard, and a full scan every ``full_scan_interval_ms``, with
   which the tiered prefix is listed too (``walmgr.segments``);
2. the age gate picks candidates (a segment's counts the swap deadline);
   the decision core plans one ``referenced_files`` RPC per leader broker
   (many keys each); a segment's ``.log`` is asked about as a WAL object,
   its indexes are deleted unasked once it is gone
   (docs/design/tiered-gate.md);
3. the answers decide; referenced and doubtful objects are kept (with the
   reason, for ``inspect``), the rest go into the persisted plan;
4. the deleter deletes from the plan and records each confirmed deletion.

The registry's lock makes this the only active manager on that registry.
Every limit is a config key (``walmgr.config``) and a metric.

Cluster identity (design.md, "Deletion safety", step 0): at start the registry
is bound to one cluster id (the configured one, the metadata's, and the
registry's own must agree), brokers are reached with that id in the
handshake, and footers naming another cluster make their objects INVALID.
A metadata source or a broker of another cluster stops walmgr with
:class:`ClusterMismatchError` (exit status 2 in the CLI): nothing it would
decide could be trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from partlog.controller.cluster_meta import (
    ClusterMismatchError,
    CountsFailures,
    MetadataSource,
    Startable,
    StaticMetadata,
    check_same_cluster,
)
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.frame import RpcError, RpcErrorCode
from partlog.rpc.methods import NOTIFY_OBJECTS_MAX, WALMGR_SCHEMAS
from partlog.rpc.secret import read_secret_file
from partlog.rpc.server import RpcServer
from partlog.rpc.tls import mutual_tls
from partlog.rpc.wire import (
    WireError,
    dec_wal_uploaded,
)
from partlog.runtime import SYSTEM_CLOCK, SYSTEM_ENTROPY, Clock, Entropy
from partlog.wal.objectstore import DeleteResult, ObjectInfo, ObjectStore, ObjectStoreError
from partlog.wal.store_url import open_store
from walmgr.asking import BrokerAsker
from walmgr.authz import NotificationAuthz, notification_authz
from walmgr.config import WalmgrConfig, WalmgrConfigError
from walmgr.cycle_report import LAST_CYCLE_META, CycleReport
from walmgr.decide import CheckPlan, Decision, decide, past_age_gate, plan_checks, split_checks, sweep
from walmgr.deleter import DeleteReport, execute_plan
from walmgr.listing import inspect_object
from walmgr.metrics import WalmgrMetrics
from walmgr.model import ObjectRecord, Source, State
from walmgr.paced_store import PacedStore
from walmgr.progress import ProgressLog, ProgressSink, ScanProgress, fan_out
from walmgr.registry import Registry
from walmgr.scanner import Scanner, ScanReport, register_notifications, shard_lists_in_flight_for
from walmgr.segments import (
    SegmentRound,
    is_segment_key,
    leftover_verdict,
    scan_segments,
    split_round,
)
from walmgr.spark_scan import SparkScanError
from walmgr.spark_scan import check_available as check_spark_available

log = logging.getLogger(__name__)


# Candidates decided per round of a cycle (one referenced_files RPC per
# broker per round): bounds the records a cycle holds in memory.
CHECK_ROUND_OBJECTS = 10_000


def load_metadata(
    spec: str,
    *,
    cluster_id: uuid.UUID | None = None,
    secret: bytes | None = None,
    client_ssl: ssl.SSLContext | None = None,
) -> MetadataSource | None:
    """``controller://HOST:PORT`` (not started; it is reached with
    ``secret``, ``client_ssl`` and, when known, ``cluster_id``), an
    ``etcd://`` or ``etcd+tls://`` URL (a view only: it never creates a cluster, so a prefix
    holding none, or another cluster's, refuses to start), a static
    cluster TOML, or None."""
    if not spec:
        return None
    if spec.startswith(("etcd://", "etcd+tls://")):
        from partlog.controller.etcd_meta import EtcdMetadata

        return EtcdMetadata(spec, cluster_id=cluster_id)
    if spec.startswith("controller://"):
        from partlog.controller.client import ControllerMetadata

        host, _, port = spec.removeprefix("controller://").rpartition(":")
        return ControllerMetadata(host, int(port), cluster_id=cluster_id, secret=secret, ssl=client_ssl)
    return StaticMetadata.from_toml(spec)


class Walmgr:
    """``await start()``; then ``await cycle()`` or ``await run()`` until ``await stop()``."""

    def __init__(
        self,
        config: WalmgrConfig,
        *,
        store: ObjectStore | None = None,
        metadata: MetadataSource | None = None,
        clock: Clock = SYSTEM_CLOCK,
        entropy: Entropy = SYSTEM_ENTROPY,
        secret: bytes | None = None,
        server_ssl: ssl.SSLContext | None = None,
        client_ssl: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        # The store it opens itself is paced and retries reads (a store
        # passed in is used as given: tests inject faults below or above).
        self.store = (
            store
            if store is not None
            else PacedStore(open_store(config.store_url), config.s3_requests_per_s_max, config.store_read_attempts)
        )
        self.registry: Registry | None = None
        self._metadata = metadata
        self._own_metadata = False
        self.clock = clock
        self.entropy = entropy  # the notification server's handshake nonces
        if secret is None and config.secret_file:
            secret = read_secret_file(config.secret_file)
        self._secret = secret
        if server_ssl is None and client_ssl is None:
            contexts = mutual_tls(config.tls_ca_file, config.tls_cert_file, config.tls_key_file)
            if contexts is not None:
                server_ssl, client_ssl = contexts.server, contexts.client
        self._server_ssl = server_ssl
        self._client_ssl = client_ssl
        # The cluster this walmgr manages: bound at start (see the module doc).
        self.cluster_id: uuid.UUID | None = None
        self.metrics: WalmgrMetrics | None = None
        self._server: RpcServer | None = None
        self._authz: NotificationAuthz | None = None
        self._asker = BrokerAsker(
            lambda: self.metadata,
            lambda: self.cluster_id,
            timeout_ms=config.check_timeout_ms,
            secret=secret,
            client_ssl=client_ssl,
        )
        self._stop = asyncio.Event()
        # Called with each full scan's progress besides the log and the
        # metrics (``walmgr scan`` sets a progress bar); local engine only.
        self.scan_progress: ProgressSink | None = None
        self._last_cycle_ms = 0
        self.port = 0

    @property
    def metadata(self) -> MetadataSource | None:
        return self._metadata

    @metadata.setter
    def metadata(self, metadata: MetadataSource | None) -> None:
        """Adopt other metadata (a test's, an embedder's); once started, it
        must name the cluster the registry is bound to (ClusterMismatchError)."""
        self._metadata = metadata
        if self.registry is not None:
            self._bind_cluster()

    # ------------------------------------------------------------ lifecycle

    async def start(self, *, metadata_timeout_ms: int | None = None) -> None:
        """Open the registry, reach the metadata and bind the cluster id.

        ``metadata_timeout_ms`` bounds the wait for a controller (one-shot
        commands; then ``ControllerUnavailableError``); None waits as long
        as it takes, logging and counting each failed attempt (the daemon).
        """
        if self.config.scan_engine == "spark":
            try:
                check_spark_available()
            except SparkScanError as e:
                raise WalmgrConfigError(str(e), key="scan.engine") from e
        self.registry = Registry(self.config.registry)  # raises RegistryLockedError for a second manager
        last = self.registry.meta_get("last_cycle_ms")
        self._last_cycle_ms = int(last) if last is not None else 0
        self.metrics = WalmgrMetrics(self.registry, lambda: self._last_cycle_ms, self.clock.wall_ms)
        self.metrics.watch_store(self.store)
        if self.config.metrics_port:
            try:
                self.metrics.serve(self.config.metrics_port)
            except OSError as e:
                raise OSError(e.errno, f"metrics_port 127.0.0.1:{self.config.metrics_port}: {e.strerror}") from e
        if self._metadata is None and self.config.metadata:
            self._metadata = load_metadata(
                self.config.metadata,
                cluster_id=self.config.cluster or self.registry.cluster_id,
                secret=self._secret,
                client_ssl=self._client_ssl,
            )
            self._own_metadata = True
            metadata = self.metadata
            if isinstance(metadata, CountsFailures):  # Controller/EtcdMetadata count what they retry
                self.metrics.metadata_errors.set_function(lambda: float(metadata.failures))
            if isinstance(metadata, Startable):
                await metadata.start(timeout_ms=metadata_timeout_ms)
        self._bind_cluster()
        if self.config.listen:
            host, _, port = self.config.listen.rpartition(":")
            assert self.metrics is not None
            self._authz = notification_authz(self.config, self.metadata, self.metrics.prom, self.clock)
            if self._authz is not None:
                await self._authz.start()
            self._server = RpcServer(
                {"wal_uploaded": self._handle_wal_uploaded},
                host=host,
                port=int(port),
                secret=self._secret,
                ssl=self._server_ssl,
                cluster_id=self.cluster_id,
                schemas=WALMGR_SCHEMAS,
                clock=self.clock,
                entropy=self.entropy,
                authorize=self._authz.hook if self._authz is not None else None,
                principal_mapper=self._authz.principals if self._authz is not None else None,
            )
            await self._server.start()
            self.port = self._server.port
        log.info(
            "walmgr started store=%s registry=%s prefix=%s age_gate_ms=%d listen=%s",
            self.store.describe(),
            self.config.registry,
            self.config.prefix,
            self.config.age_gate_ms,
            f"127.0.0.1:{self.port}" if self._server else "-",
        )

    def _bind_cluster(self) -> None:
        """Settle the cluster id: the configured one, the metadata's and the
        registry's must agree (ClusterMismatchError names both otherwise);
        the registry is bound to it on first use.  Without metadata and
        without a configured or bound id it stays None: scans still record
        what they find, but nothing is decided."""
        reg = self._reg()
        configured = self.config.cluster
        from_metadata = getattr(self.metadata, "cluster_id", None) if self.metadata is not None else None
        if self.metadata is not None and not isinstance(from_metadata, uuid.UUID):
            raise ClusterMismatchError(f"the cluster metadata {self.config.metadata or '(given)'} names no cluster id")
        check_same_cluster("the cluster metadata", from_metadata, "the configured cluster_id", configured)
        cluster_id = from_metadata or configured or reg.cluster_id
        if cluster_id is not None:
            reg.bind_cluster(cluster_id)  # raises ClusterMismatchError for a registry of another cluster
        self.cluster_id = cluster_id

    async def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            await self._server.close()
        if self._authz is not None:
            await self._authz.stop()
        await self._asker.close()
        if self._own_metadata and self.metadata is not None:
            stop = getattr(self.metadata, "stop", None)
            if stop is not None:
                await stop()
        if self.metrics is not None:
            self.metrics.close()
        if self.registry is not None:
            self.registry.close()
            self.registry = None

    async def run(self) -> None:
        """Cycle every ``cycle_interval_ms`` until ``stop()`` (or SIGTERM in the CLI)."""
        while not self._stop.is_set():
            try:
                await self.cycle()
            except ClusterMismatchError:
                raise  # misconfigured: nothing decided from here on could be trusted
            except Exception:  # a failed cycle is retried next interval; never exit on it
                log.exception("walmgr cycle failed")
                if self.metrics is not None:
                    self.metrics.cycle_errors.inc()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.cycle_interval_ms / 1000):
                    await self._stop.wait()

    # ---------------------------------------------------------- notifications

    async def _handle_wal_uploaded(self, body: Any) -> Any:
        try:
            objects = dec_wal_uploaded(body, NOTIFY_OBJECTS_MAX)
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        reg = self._reg()
        now = self.clock.wall_ms()
        added = len(await asyncio.to_thread(register_notifications, reg, self.config.prefix, objects, now))
        if self.metrics is not None:
            self.metrics.notifications.inc(added)
        return {"accepted": added}

    # ------------------------------------------------------------------ cycle

    def _reg(self) -> Registry:
        if self.registry is None:
            raise RuntimeError("walmgr is not started")
        return self.registry

    async def scan(self, *, full: bool = False) -> ScanReport:
        """One scan: incremental (in this process), or full, on the engine
        ``scan.engine`` names (this process, or Spark)."""
        cfg = self.config
        if full and cfg.scan_engine == "spark":
            from walmgr.spark_scan import spark_scan

            report = await asyncio.to_thread(
                spark_scan,
                cfg.store_url,
                self._reg(),
                cfg.prefix,
                clock=self.clock,
                master=cfg.scan_spark_master,
                full=True,
                lookback_ms=cfg.commit_deadline_ms + cfg.max_clock_skew_ms,
                gone_age_ms=cfg.age_gate_ms,
            )
            self._observe(report, full=True)
            return report
        scanner = Scanner(
            self.store,
            self._reg(),
            cfg.prefix,
            clock=self.clock,
            # Incremental scans look back over the window in which a late
            # upload can still be committed; full scans mark an object gone
            # only when it is older than the age gate.
            lookback_ms=cfg.commit_deadline_ms + cfg.max_clock_skew_ms,
            gone_age_ms=cfg.age_gate_ms,
            footer_reads_in_flight_max=cfg.footer_reads_max_in_flight,
            shard_lists_in_flight_max=shard_lists_in_flight_for(self.store),
        )
        if full:
            sink = fan_out(
                ProgressLog(on_update=self._observe_progress, clock=self.clock.monotonic), self.scan_progress
            )
            report = await asyncio.to_thread(scanner.full, sink)
        else:
            report = await asyncio.to_thread(scanner.incremental)
        self._observe(report, full=full)
        return report

    async def _scan_segments(self, report: CycleReport, scan_errors_fatal: bool) -> None:
        """List the tiered prefix into the registry (with each full scan:
        segment keys do not sort by time, so there is no incremental scan)."""
        cfg = self.config
        try:
            found = await asyncio.to_thread(
                scan_segments, self.store, self._reg(), cfg.tiered_prefix,
                now_ms=self.clock.wall_ms(), gone_age_ms=cfg.segment_age_gate_ms,
            )  # fmt: skip
        except ObjectStoreError as e:
            if scan_errors_fatal:
                raise
            report.scan_error = f"{report.scan_error}; {e}" if report.scan_error else str(e)
            log.warning("walmgr tiered scan failed (retried next cycle): %s", e)
            if self.metrics is not None:
                self.metrics.scan_errors.inc()
            return
        report.segments = found
        if self.metrics is not None:
            self.metrics.segment_keys_listed.inc(found.keys_listed)
            self.metrics.segment_invalid.inc(found.invalid_count)

    def _observe_progress(self, p: ScanProgress) -> None:
        m = self.metrics
        if m is None:
            return
        m.scan_keys_per_s.set(p.keys_per_s)
        if p.fraction_done is not None:
            m.full_scan_progress.set(p.fraction_done)
        eta = p.eta_s
        if eta is not None:
            m.full_scan_eta_seconds.set(eta)

    def _observe(self, report: ScanReport, *, full: bool) -> None:
        m = self.metrics
        if m is None:
            return
        if report.seconds > 0:
            m.scan_keys_per_s.set(report.keys_listed / report.seconds)
        if full:
            m.full_scan_progress.set(1.0)
            m.full_scan_eta_seconds.set(0.0)
            m.full_scan_seconds.labels("total").set(report.seconds)
            for stage, seconds in report.stages.items():
                m.full_scan_seconds.labels(stage).set(seconds)

    async def cycle(
        self, *, dry_run: bool = False, full_scan: bool | None = None, scan_errors_fatal: bool = False
    ) -> CycleReport:
        """One cycle (module doc).  A failed scan is logged and the cycle
        goes on with what is known (the daemon: the scan is retried next
        cycle); with ``scan_errors_fatal`` (one-shot commands) it raises the
        store's error instead, so "nothing to delete" is never printed for a
        store that could not be read."""
        reg = self._reg()
        cfg = self.config
        start = self.clock.monotonic()
        report = CycleReport(self.clock.wall_ms(), dry_run=dry_run)
        # A failed scan (the store down for a moment) must not stop the rest
        # of the cycle: the objects already known are still checked and the
        # persisted plan still runs; the scan is retried next cycle.
        # The full scan runs even when the incremental one failed: each is
        # the other's fallback for learning objects.
        last_full = reg.meta_get("last_full_scan_ms")
        due = last_full is None or self.clock.wall_ms() - int(last_full) >= cfg.full_scan_interval_ms
        for full in (False, True):
            if full and not (full_scan or (full_scan is None and due)):
                continue
            try:
                scanned = await self.scan(full=full)
            except (ObjectStoreError, SparkScanError) as e:
                if scan_errors_fatal:
                    raise
                report.scan_error = f"{report.scan_error}; {e}" if report.scan_error else str(e)
                log.warning("walmgr %s scan failed (retried next cycle): %s", "full" if full else "incremental", e)
                if self.metrics is not None:
                    self.metrics.scan_errors.inc()
                continue
            if full:
                report.full = scanned
                await self._scan_segments(report, scan_errors_fatal)
            else:
                report.incremental = scanned
        # Candidates are decided in rounds of CHECK_ROUND_OBJECTS streamed
        # from the registry, so memory does not grow with the bucket (a soak
        # of 1M orphans held 1.7 GiB of records when they were listed at
        # once).  Streams go by state, CANDIDATE before TRACKED: a candidate
        # kept as referenced becomes TRACKED and would be streamed again, so
        # those keys (few: doubts that resolved) are skipped this cycle.
        stream = reg.records({State.CANDIDATE, State.TRACKED})
        seen_again: set[str] = set()
        gate_now = self.clock.wall_ms()

        def gate_ms(r: ObjectRecord) -> int:
            return cfg.segment_age_gate_ms if is_segment_key(r.key, cfg.tiered_prefix) else cfg.age_gate_ms

        def next_round() -> list[ObjectRecord]:
            out: list[ObjectRecord] = []
            for r in stream:
                if r.key in seen_again:
                    continue
                if past_age_gate(r, gate_now, gate_ms(r)):
                    out.append(r)
                if len(out) >= CHECK_ROUND_OBJECTS:
                    break
            return out

        while cands := await asyncio.to_thread(next_round):
            seen_again |= await self._decide_round(cands, report, dry_run)
        if not dry_run:
            report.deleted = await asyncio.to_thread(self._delete)
            if self.metrics is not None and report.deleted is not None:
                self.metrics.deleted_files.inc(report.deleted.deleted_files)
                self.metrics.deleted_bytes.inc(report.deleted.deleted_bytes)
                self.metrics.segment_deleted_files.inc(report.deleted.segment_files)
                self.metrics.segment_deleted_bytes.inc(report.deleted.segment_bytes)
                self.metrics.delete_failures.inc(len(report.deleted.failed))
            await asyncio.to_thread(reg.purge_tombstones, self.clock.wall_ms(), cfg.tombstone_retention_ms)
            self._last_cycle_ms = last_cycle_ms = self.clock.wall_ms()
            summary = report.summary()

            # Registry writes commit (an fsync) off the event loop: inline,
            # one stalled a broker's loop sharing it for ~190 ms.
            def record() -> None:
                reg.meta_set("last_cycle_ms", str(last_cycle_ms))
                reg.meta_set(LAST_CYCLE_META, summary)

            await asyncio.to_thread(record)
        else:
            # The same plan, deleted by a no-op: what a real cycle would send.
            report.deleted = DeleteReport()
        if self.metrics is not None:
            self.metrics.cycles.inc()
        report.seconds = self.clock.monotonic() - start
        log.info(
            "walmgr cycle candidates=%d referenced=%d doubt=%d planned=%d deleted=%d dry_run=%s seconds=%.3f",
            report.candidates,
            report.referenced_count,
            report.doubt_count,
            report.planned_count,
            report.deleted.deleted_files if report.deleted else 0,
            dry_run,
            report.seconds,
        )
        return report

    async def _decide_round(self, cands: list[ObjectRecord], report: CycleReport, dry_run: bool) -> set[str]:
        """Check one round of candidates, record what is kept and plan what
        is not (unless ``dry_run``); the keys of candidates now TRACKED."""
        reg = self._reg()
        tiered = self.config.tiered_prefix
        segments = [r for r in cands if is_segment_key(r.key, tiered)]
        # A notification's partition list is the broker's word: read the
        # footer before anything is decided on it (one suffix GET each).
        wal = await asyncio.to_thread(self._verify_footers, [r for r in cands if not is_segment_key(r.key, tiered)])
        # Segments: the .log is asked about like a WAL object (its key names
        # partition and cluster); an index only once its .log is gone.
        split, leftovers = (
            await asyncio.to_thread(self._split_segments, segments) if segments else (SegmentRound([], [], [], {}), {})
        )
        waiting = set(split.waiting)
        cands = wal + [r for r in segments if r.key not in waiting]
        report.candidates += len(cands)
        report.segment_candidates += len(cands) - len(wal)
        if self.metrics is not None:
            self.metrics.segment_candidates.inc(len(cands) - len(wal))
        checked = await self._check(wal + split.logs)
        decision = Decision(
            sorted(checked.delete + [k for k, why in leftovers.items() if why is None]),
            checked.referenced,
            {**split.kept, **{k: why for k, why in leftovers.items() if why is not None}, **checked.doubt},
        )
        report.note_decision(decision.referenced, decision.doubt, decision.delete)
        by_key = {r.key: r for r in cands}
        now = self.clock.wall_ms()
        kept = [
            by_key[k].with_state(State.TRACKED, note=f"referenced: {why}", last_checked_ms=now)
            for k, why in decision.referenced.items()
        ] + [
            by_key[k].with_state(State.CANDIDATE, note=f"kept: {why}", last_checked_ms=now)
            for k, why in decision.doubt.items()
            if k in by_key
        ]
        if self.metrics is not None:
            self.metrics.kept_referenced.inc(len(decision.referenced))
            self.metrics.kept_doubt.inc(len(decision.doubt))
        if not dry_run:
            await asyncio.to_thread(reg.put_many, kept)
            await asyncio.to_thread(
                reg.plan, [by_key[k].with_state(State.PLANNED, note="", last_checked_ms=now) for k in decision.delete]
            )
        return {k for k in decision.referenced if k in by_key and by_key[k].state == State.CANDIDATE}

    def _split_segments(self, segments: list[ObjectRecord]) -> tuple[SegmentRound, dict[str, str | None]]:
        """A round's segment candidates split (``walmgr.segments.split_round``),
        and for each index leftover why it is kept (None: its .log is gone)."""
        reg = self._reg()
        split = split_round(segments, lambda k: getattr(reg.get(k), "state", None))
        return split, {r.key: leftover_verdict(self.store, r) for r in split.leftovers}

    def _verify_footers(self, cands: list[ObjectRecord]) -> list[ObjectRecord]:
        """Candidates with a footer read and checked by this walmgr: the ones
        learned from notifications (the footer decides, not the broker's
        word) and the ones recorded before their cluster was known (a scan
        before the registry was bound) are read again, as the scan would
        record them; the rest as they are.  An unreadable object stays out
        of this round; an invalid one (no or another cluster, a footer that
        does not account for the object) is recorded INVALID."""
        out: list[ObjectRecord] = []
        verified: list[ObjectRecord] = []
        for r in cands:
            if r.source != Source.NOTIFICATION and r.cluster_id is not None:
                out.append(r)
                continue
            try:
                found = inspect_object(
                    self.store,
                    ObjectInfo(r.key, r.size, r.created_ms),
                    self.config.prefix,
                    self.clock.wall_ms(),
                    self.cluster_id,
                )
            except ObjectStoreError as e:
                log.info("walmgr could not read the footer of key=%s: %s (kept)", r.key, e)
                continue
            if found is None:
                continue  # vanished: a full scan marks it gone
            rec = replace(
                r, partitions=found.partitions, source=Source.SCAN, size=found.size, cluster_id=found.cluster_id
            )
            if found.state == State.INVALID:
                rec = rec.with_state(State.INVALID, note=found.note)
            verified.append(rec)
            if rec.state != State.INVALID:
                out.append(rec)
        if verified:
            self._reg().put_many(verified)
        return out

    def _delete(self, delete: Callable[[Sequence[str]], DeleteResult] | None = None) -> DeleteReport:
        return execute_plan(
            self.store,
            self._reg(),
            self.config.prefix,
            batch_size=self.config.delete_batch_size,
            clock=self.clock,
            delete=delete,
            tiered_prefix=self.config.tiered_prefix,
            cluster_id=self.cluster_id,
        )

    # ------------------------------------------------------------ the check

    def _leader(self, tp: TopicIdPartition) -> tuple[int, int] | None:
        p = self.metadata.partition(tp) if self.metadata is not None else None
        if p is None or p.leader < 0:
            return None  # unknown partition or no leader: a doubt
        return p.leader, p.leader_epoch

    def _isr(self, tp: TopicIdPartition) -> tuple[int, ...]:
        p = self.metadata.partition(tp) if self.metadata is not None else None
        return () if p is None else p.isr

    def _topic_deleted(self, tp: TopicIdPartition) -> bool:
        """Only a source that records deletions can say so (``topic_deleted``);
        a topic merely missing from the view is a doubt, never a deletion:
        the view may be stale or incomplete."""
        deleted = getattr(self.metadata, "topic_deleted", None)
        return bool(deleted(tp.topic_id)) if deleted is not None else False

    async def _check(self, cands: list[ObjectRecord]) -> Decision:
        if not cands:
            return Decision([], {}, {})
        if self.metadata is None:
            return Decision([], {}, {r.key: "no cluster metadata configured" for r in cands})
        if self.cluster_id is None:  # not started: _bind_cluster refuses metadata without one
            return Decision([], {}, {r.key: "no cluster id known" for r in cands})
        plan: CheckPlan = plan_checks(cands, self._topic_deleted, self._leader, self.cluster_id, self._isr)
        brokers = list(plan.by_broker)
        started = self.clock.monotonic()
        answers = await asyncio.gather(*(self._asker.referenced_files(b, plan.by_broker[b]) for b in brokers))
        decision = decide(plan, dict(zip(brokers, answers, strict=True)), self._leader, self._isr)
        decision = await self._sweep(decision, plan.unreferenced)
        took_ms = (self.clock.monotonic() - started) * 1000
        if decision.delete and took_ms > self.config.verdict_window_ms:
            # Answers further apart than this may miss a reference moving
            # between brokers (partlog.store.release_grace): ask again.
            why = f"answers spanned {took_ms:.0f} ms, over verdict_window_ms={self.config.verdict_window_ms}"
            log.warning("walmgr kept %d keys: %s", len(decision.delete), why)
            if self.metrics is not None:
                self.metrics.over_verdict_window.inc()
            doubt = {**decision.doubt, **dict.fromkeys(decision.delete, why)}
            decision = Decision([], decision.referenced, doubt)
        return decision

    async def _sweep(self, decision: Decision, deleted_topic_keys: frozenset[str]) -> Decision:
        """Every listed broker asked about the keys ``decision`` would
        delete (``walmgr.decide.sweep``): one ``keys_referenced`` RPC per
        broker and round, split at CHECKS_PER_RPC_MAX keys."""
        if not decision.delete or self.metadata is None:
            return decision
        live = [b.broker_id for b in self.metadata.brokers()]
        keys = decision.delete
        answers = await asyncio.gather(*(self._asker.keys_referenced(b, keys) for b in live))
        live_after = [b.broker_id for b in self.metadata.brokers()]
        out = sweep(decision, live, dict(zip(live, answers, strict=True)), live_after, deleted_topic_keys)
        caught = [k for k in keys if k in out.referenced and k not in decision.referenced]
        for k in caught[:10]:
            if k in deleted_topic_keys:
                # Expected: brokers drop a deleted topic's logs on their own time.
                log.info("walmgr kept key=%s: %s", k, out.referenced[k])
            else:
                log.warning("walmgr kept key=%s: %s; the leader check had cleared it", k, out.referenced[k])
        if self.metrics is not None:
            self.metrics.sweep_rpcs.inc(len(live) * len(split_checks(keys)))
            self.metrics.sweep_keys.inc(len(live) * len(keys))
            self.metrics.kept_by_sweep.inc(len(caught))
        return out
