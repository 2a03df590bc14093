"""What ``partlog status`` can learn about walmgr, from the two things a
running walmgr exposes (docs/design/status.md):

* its **registry** (``--walmgr DIR``, or a walmgr config file naming it):
  opened read-only, without the writer's lock, as ``walmgr status`` does, so
  it works beside the daemon.  It holds when the last cycle ended
  (``last_cycle_ms``, written at the end of every non-dry cycle), the last
  full scan, the cluster it is bound to, the objects per state and the
  deletions of all time;
* its **metrics endpoint** (``--walmgr http://127.0.0.1:PORT/``,
  ``metrics_port`` in its config): the Prometheus counters of the running
  process (cycles, deletions, kept objects, errors, all since it started)
  and the age of its last successful cycle.

Neither holds one cycle's own figures (walmgr keeps no per-cycle report
after the cycle), so the counts are labelled with what they cover.  Each
reader returns a :class:`WalmgrStatus`; one that cannot read its source
says why in ``error`` and never raises.
"""

from __future__ import annotations

import math
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

# Bound on a metrics page: walmgr's is a few KiB; more is not walmgr's.
METRICS_BYTES_MAX = 1 << 20


@dataclass(frozen=True, slots=True)
class WalmgrStatus:
    """walmgr as one source showed it; None: that source does not say."""

    source: str  # "registry" or "metrics"
    where: str
    error: str = ""  # why the source could not be read ("" when it was)
    last_cycle_ms: int | None = None  # when the last successful cycle ended (ms since the epoch)
    last_full_scan_ms: int | None = None
    cluster_id: str | None = None
    # Counts: "registry": of all time; "metrics": since the process started.
    cycles: int | None = None
    deleted_files: int | None = None
    kept_referenced: int | None = None
    kept_doubt: int | None = None
    cycle_errors: int | None = None
    scan_errors: int | None = None
    delete_failures: int | None = None
    metadata_errors: int | None = None
    tracked: int | None = None  # objects not yet deleted (tracked, candidate, planned)
    planned: int | None = None
    # The last cycle's own counts (registry only; walmgr keeps them since
    # this release): candidates, kept_referenced, kept_doubt, deleted_files,
    # delete_failures, and its scan error ("" when none).
    last_cycle: dict[str, int | str] | None = None


def is_metrics_url(where: str) -> bool:
    return where.startswith(("http://", "https://"))


def read_registry(where: str) -> WalmgrStatus:
    """The registry at ``where`` (its directory, or a walmgr config file)."""
    import lmdb

    from walmgr.config import WalmgrConfigError, load_config
    from walmgr.cycle_report import LAST_CYCLE_META
    from walmgr.model import State
    from walmgr.registry import COUNTER_DELETED_FILES, Registry, RegistryError

    path = where
    try:
        if os.path.isfile(where):
            path = load_config(where).registry
        with Registry(path, readonly=True) as reg:
            counts = reg.counts()
            last_cycle = reg.meta_get("last_cycle_ms")
            last_full = reg.meta_get("last_full_scan_ms")
            summary = reg.meta_get(LAST_CYCLE_META)
            deleted = int(reg.meta_get(COUNTER_DELETED_FILES, 0))
            cluster_id = reg.cluster_id
        tracked = sum(counts.get(s, (0, 0))[0] for s in (State.TRACKED, State.CANDIDATE, State.PLANNED))
        return WalmgrStatus(
            "registry",
            where,
            last_cycle_ms=int(last_cycle) if last_cycle else None,
            last_full_scan_ms=int(last_full) if last_full else None,
            cluster_id=None if cluster_id is None else str(cluster_id),
            deleted_files=deleted,
            tracked=tracked,
            planned=counts.get(State.PLANNED, (0, 0))[0],
            last_cycle=_summary(summary),
        )
    # A registry that does not decode (msgpack's errors are ValueErrors) is
    # an unreadable source, as a missing one.
    except (RegistryError, WalmgrConfigError, OSError, lmdb.Error, ValueError, TypeError) as e:
        # The registry's messages begin with its path, which ``where`` already names.
        text = str(e).removeprefix(f"registry {os.path.abspath(path)}: ")
        return WalmgrStatus("registry", where, error=" ".join(text.split()) or type(e).__name__)


_SUMMARY_KEYS = ("candidates", "kept_referenced", "kept_doubt", "deleted_files", "delete_failures")


def _summary(v: object) -> dict[str, int | str] | None:
    """The last cycle's summary as the registry holds it, checked (a value
    of another shape, or from an older walmgr: None)."""
    if not isinstance(v, dict):
        return None
    out: dict[str, int | str] = {}
    for k in _SUMMARY_KEYS:
        n = v.get(k)
        if type(n) is not int or n < 0:
            return None
        out[k] = n
    err = v.get("scan_error", "")
    out["scan_error"] = err[:200] if isinstance(err, str) else ""
    return out


def fetch_metrics(url: str, timeout_s: float, now_ms: int) -> WalmgrStatus:
    """Scrape walmgr's metrics endpoint (blocking: run it in a thread);
    ``now_ms``: the wall clock when it is read (the page gives ages)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            text = r.read(METRICS_BYTES_MAX + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        return WalmgrStatus("metrics", url, error=" ".join(str(reason).split()) or type(e).__name__)
    if len(text) > METRICS_BYTES_MAX:
        return WalmgrStatus("metrics", url, error=f"more than {METRICS_BYTES_MAX} bytes: not walmgr's metrics")
    return parse_metrics(url, text.decode("utf-8", errors="replace"), now_ms)


def parse_metrics(url: str, text: str, now_ms: int) -> WalmgrStatus:
    """walmgr's figures from a Prometheus text page read at ``now_ms`` (sans-IO)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.labels:
                    values[sample.name] = sample.value
    except ValueError as e:
        return WalmgrStatus("metrics", url, error=f"not Prometheus text: {' '.join(str(e).split())[:200]}")
    if "walmgr_cycles_total" not in values:
        return WalmgrStatus("metrics", url, error="no walmgr_cycles_total: not walmgr's metrics")

    def n(name: str) -> int | None:
        v = values.get(name)
        return None if v is None or not math.isfinite(v) else int(v)

    age_s = values.get("walmgr_last_cycle_age_seconds", math.nan)  # NaN until the first cycle ends
    return WalmgrStatus(
        "metrics",
        url,
        last_cycle_ms=None if not math.isfinite(age_s) else now_ms - int(age_s * 1000),
        cycles=n("walmgr_cycles_total"),
        deleted_files=n("walmgr_deleted_files_total"),
        kept_referenced=n("walmgr_kept_referenced_total"),
        kept_doubt=n("walmgr_kept_doubt_total"),
        cycle_errors=n("walmgr_cycle_errors_total"),
        scan_errors=n("walmgr_scan_errors_total"),
        delete_failures=n("walmgr_delete_failures_total"),
        metadata_errors=n("walmgr_metadata_errors"),
        tracked=n("walmgr_files_tracked"),
        planned=n("walmgr_planned"),
    )
