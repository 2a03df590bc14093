"""walmgr's Prometheus metrics (served on ``metrics_port``): the registry's
object counts as gauges, and counters the daemon bumps per cycle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from walmgr.model import State
from walmgr.paced_store import PacedStore
from walmgr.registry import Registry

__all__ = ["WalmgrMetrics"]

class WalmgrMetrics:
    """The metrics of one walmgr process, on their own Prometheus registry."""

    def __init__(self, registry: Registry, last_cycle_ms: Callable[[], int], clock: Callable[[], int]) -> None:
        self.prom = CollectorRegistry()
        r = self.prom
        self._http: Any = None

        def count(state: State, i: int) -> Callable[[], float]:
            return lambda: float(registry.counts().get(state, (0, 0))[i])

        Gauge("walmgr_files_tracked", "objects tracked (not yet deleted)", registry=r).set_function(
            lambda: float(sum(registry.counts().get(s, (0, 0))[0] for s in _LIVE))
        )
        Gauge("walmgr_bytes_tracked", "bytes of the objects tracked", registry=r).set_function(
            lambda: float(sum(registry.counts().get(s, (0, 0))[1] for s in _LIVE))
        )
        Gauge("walmgr_candidates", "objects past the age gate awaiting a check", registry=r).set_function(
            count(State.CANDIDATE, 0)
        )
        Gauge("walmgr_planned", "objects in the persisted delete plan", registry=r).set_function(
            count(State.PLANNED, 0)
        )
        Gauge("walmgr_invalid", "keys under the prefix that are not valid WAL objects", registry=r).set_function(
            count(State.INVALID, 0)
        )
        self.deleted_files = Counter("walmgr_deleted_files", "objects deleted (confirmed by the store)", registry=r)
        self.deleted_bytes = Counter("walmgr_deleted_bytes", "bytes of the objects deleted", registry=r)
        self.kept_referenced = Counter(
            "walmgr_kept_referenced", "checks that kept an object because a leader references it", registry=r
        )
        self.kept_doubt = Counter(
            "walmgr_kept_doubt", "checks that kept an object on doubt (error, timeout, leader change)", registry=r
        )
        self.kept_by_sweep = Counter(
            "walmgr_kept_by_sweep",
            "objects the leader check cleared that some broker still references: a footer that names the "
            "wrong partitions (a writer's bug); each is kept and logged",
            registry=r,
        )
        self.over_verdict_window = Counter(
            "walmgr_rounds_over_verdict_window",
            "check rounds whose answers spanned more than verdict_window_ms: every key kept (release-grace.md)",
            registry=r,
        )
        self.sweep_rpcs = Counter("walmgr_sweep_rpcs", "keys_referenced RPCs sent to brokers (the sweep)", registry=r)
        self.sweep_keys = Counter("walmgr_sweep_keys", "keys asked in the sweep, summed over brokers", registry=r)
        self.delete_failures = Counter("walmgr_delete_failures", "deletions the store did not confirm", registry=r)
        self.segment_keys_listed = Counter(
            "walmgr_segment_keys_listed", "keys listed under the tiered prefix (with each full scan)", registry=r
        )
        self.segment_invalid = Counter(
            "walmgr_segment_invalid",
            "keys newly found under the tiered prefix that are not segment keys of this cluster (kept)",
            registry=r,
        )
        self.segment_candidates = Counter(
            "walmgr_segment_candidates", "tiered segment objects past the segment age gate, decided", registry=r
        )
        self.segment_deleted_files = Counter(
            "walmgr_segment_deleted_files", "tiered segment objects deleted (confirmed by the store)", registry=r
        )
        self.segment_deleted_bytes = Counter(
            "walmgr_segment_deleted_bytes", "bytes of the tiered segment objects deleted", registry=r
        )
        self.notifications = Counter("walmgr_notifications", "objects learned from broker notifications", registry=r)
        self.scan_keys_per_s = Gauge(
            "walmgr_scan_keys_per_second",
            "keys listed per second: the running full scan's, else the last scan's",
            registry=r,
        )
        self.full_scan_progress = Gauge(
            "walmgr_full_scan_progress_ratio",
            "share of the prefix the running full scan has listed (1 when none runs)",
            registry=r,
        )
        self.full_scan_progress.set(1.0)
        self.full_scan_eta_seconds = Gauge(
            "walmgr_full_scan_eta_seconds",
            "seconds the running full scan still needs at its pace (0 when none runs)",
            registry=r,
        )
        self.cycles = Counter("walmgr_cycles", "cycles completed", registry=r)
        self.cycle_errors = Counter("walmgr_cycle_errors", "cycles that failed (retried next interval)", registry=r)
        self.scan_errors = Counter(
            "walmgr_scan_errors", "scans the store or the Spark job failed (retried next cycle)", registry=r
        )
        self.metadata_errors = Gauge(
            "walmgr_metadata_errors",
            "calls to the cluster metadata (the controller) that failed; walmgr keeps retrying",
            registry=r,
        )
        self.full_scan_seconds = Gauge(
            "walmgr_full_scan_seconds",
            "the last full scan's seconds: stage 'total', and on Spark startup/snapshot/listing/footers/gone/merge",
            ["stage"],
            registry=r,
        )
        Gauge("walmgr_last_cycle_age_seconds", "seconds since the last successful cycle", registry=r).set_function(
            lambda: (clock() - last_cycle_ms()) / 1000 if last_cycle_ms() > 0 else float("nan")
        )

    def watch_store(self, store: object) -> None:
        """Expose a :class:`PacedStore`'s pacing and backoff (cumulative)."""
        if not isinstance(store, PacedStore):
            return
        r = self.prom
        stats = store.stats

        def reader(key: str) -> Callable[[], float]:
            return lambda: stats[key]

        for name, key, doc in (
            ("walmgr_store_requests", "requests", "requests sent to the bucket"),
            ("walmgr_store_read_retries", "retries", "reads retried after a retriable error (503 SlowDown, 5xx)"),
            ("walmgr_store_backoff_seconds", "backoff_s", "seconds spent backing off before read retries"),
            ("walmgr_store_paced_seconds", "paced_s", "seconds requests waited under s3_requests_per_s_max"),
        ):
            Gauge(name, doc + " (cumulative)", registry=r).set_function(reader(key))

    def serve(self, port: int) -> None:
        self._http, _ = start_http_server(port, addr="127.0.0.1", registry=self.prom)

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


_LIVE = (State.TRACKED, State.CANDIDATE, State.PLANNED)
