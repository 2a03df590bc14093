"""One walmgr cycle's report (``Walmgr.cycle``'s return value, printed by
``walmgr run --once`` and kept in the registry as the last cycle's summary
for ``partlog status``): what was scanned, decided and deleted."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from walmgr.deleter import DeleteReport
from walmgr.scanner import ScanReport
from walmgr.segments import SegmentScanReport

__all__ = ["LAST_CYCLE_META", "REPORT_KEYS_MAX", "CycleReport"]

# The registry's meta key holding the last non-dry cycle's summary.
LAST_CYCLE_META = "last_cycle"

# Keys a cycle report lists per kind (referenced, doubt, planned); the
# counts are exact.  Bounds the report's memory on a bucket of millions.
REPORT_KEYS_MAX = 10_000


@dataclass(slots=True)
class CycleReport:
    started_ms: int
    incremental: ScanReport | None = None
    full: ScanReport | None = None
    candidates: int = 0
    # The first REPORT_KEYS_MAX keys of each kind, with the reason.
    referenced: dict[str, str] = field(default_factory=dict)
    doubt: dict[str, str] = field(default_factory=dict)
    planned: list[str] = field(default_factory=list)
    referenced_count: int = 0
    doubt_count: int = 0
    planned_count: int = 0
    deleted: DeleteReport | None = None
    # The tiered prefix's listing (with each full scan) and its candidates
    # (docs/design/tiered-gate.md).
    segments: SegmentScanReport | None = None
    segment_candidates: int = 0
    dry_run: bool = False
    seconds: float = 0.0
    scan_error: str = ""

    def note_decision(self, referenced: Mapping[str, str], doubt: Mapping[str, str], delete: Iterable[str]) -> None:
        """Add one round's decision: counts in full, keys up to REPORT_KEYS_MAX."""
        self.referenced_count += len(referenced)
        self.doubt_count += len(doubt)
        for k, why in itertools.islice(referenced.items(), max(0, REPORT_KEYS_MAX - len(self.referenced))):
            self.referenced[k] = why
        for k, why in itertools.islice(doubt.items(), max(0, REPORT_KEYS_MAX - len(self.doubt))):
            self.doubt[k] = why
        for k in delete:
            self.planned_count += 1
            if len(self.planned) < REPORT_KEYS_MAX:
                self.planned.append(k)

    def summary(self) -> dict[str, int | str]:
        """What the registry keeps of the last cycle (``last_cycle``, for
        ``partlog status``): its counts, not its keys."""
        d = self.deleted
        return {
            "candidates": self.candidates + self.segment_candidates,
            "kept_referenced": self.referenced_count,
            "kept_doubt": self.doubt_count,
            "deleted_files": (d.deleted_files + d.segment_files) if d else 0,
            "delete_failures": len(d.failed) if d else 0,
            "scan_error": self.scan_error,
        }

    def to_json(self) -> dict[str, Any]:
        d = self.deleted
        return {
            "started_ms": self.started_ms,
            "dry_run": self.dry_run,
            "seconds": self.seconds,
            "scan_error": self.scan_error,
            "scan": {
                "incremental_keys": self.incremental.keys_listed if self.incremental else 0,
                "full_keys": self.full.keys_listed if self.full else None,
                "new_objects": (self.incremental.new_objects if self.incremental else 0)
                + (self.full.new_objects if self.full else 0),
                "invalid": [list(x) for x in (self.incremental.invalid if self.incremental else [])]
                + [list(x) for x in (self.full.invalid if self.full else [])],
            },
            "candidates": self.candidates,
            "kept_referenced": self.referenced_count,
            "kept_doubt": self.doubt_count,
            "doubt": dict(sorted(self.doubt.items())[:100]),
            "plan": sorted(self.planned),
            "planned": self.planned_count,  # "plan" lists the first REPORT_KEYS_MAX
            "deleted_files": d.deleted_files if d else 0,
            "deleted_bytes": d.deleted_bytes if d else 0,
            "delete_failures": len(d.failed) if d else 0,
            "refused": d.refused if d else {},
            "segments": {
                "keys_listed": self.segments.keys_listed if self.segments else None,
                "new_objects": self.segments.new_objects if self.segments else 0,
                "invalid": [list(x) for x in (self.segments.invalid if self.segments else [])],
                "gone": self.segments.gone if self.segments else 0,
                "candidates": self.segment_candidates,
                "deleted_files": d.segment_files if d else 0,
            },
        }
