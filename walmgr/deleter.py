"""Deleting from the persisted plan: the last step of the deletion-safety
argument (design.md, "Deletion safety", step 4).

The plan is written to the registry before anything is deleted
(``Registry.plan``), so a restart resumes it without re-checking or
forgetting anything.  Each batch of at most ``delete_batch_size`` keys (S3's
DeleteObjects takes 1000) is checked once more: only keys under the
configured prefix, compared with a trailing ``/``, that parse as WAL keys of
that prefix in their hash shard (as the scanner's ``classify``), or, given
a tiered prefix and the cluster, keys under it that parse as segment keys
of that cluster (``walmgr.segments.classify_segment``), are sent; any other
key leaves the plan as INVALID and is reported.  Every deletion
the store confirmed is recorded; the rest stay planned and are retried next
cycle (the cycle interval is the backoff).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from partlog.runtime import Clock
from partlog.wal.key import WalKeyError, parse_wal_key, shard_of
from partlog.wal.objectstore import DeleteResult, ObjectStore, ObjectStoreError
from walmgr.model import State
from walmgr.registry import Registry
from walmgr.segments import classify_segment, is_segment_key

log = logging.getLogger(__name__)

# S3's DeleteObjects limit.
DELETE_BATCH_SIZE_MAX = 1000


@dataclass(slots=True)
class DeleteReport:
    deleted_files: int = 0
    deleted_bytes: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # key -> error, still planned
    refused: dict[str, str] = field(default_factory=dict)  # key -> why it may never be deleted
    batches: int = 0
    seconds: float = 0.0
    # Of deleted_files and deleted_bytes: the tiered segments' objects.
    segment_files: int = 0
    segment_bytes: int = 0


def refusal(key: str, prefix: str, tiered_prefix: str | None = None, cluster_id: uuid.UUID | None = None) -> str | None:
    """Why ``key`` must not be deleted under ``prefix`` (and ``tiered_prefix``
    for segments of ``cluster_id``), or None."""
    if tiered_prefix is not None and is_segment_key(key, tiered_prefix):
        segment = classify_segment(key, tiered_prefix, cluster_id)
        return segment if isinstance(segment, str) else None
    head = prefix.strip("/") + "/"
    if not key.startswith(head):
        return f"not under {head!r}"
    try:
        parsed = parse_wal_key(key)
    except WalKeyError as e:
        return str(e)
    if parsed.prefix != prefix.strip("/"):
        return f"a WAL key of prefix {parsed.prefix!r}, not {prefix.strip('/')!r}"
    if parsed.shard != shard_of(parsed.name):
        # Brokers make keys with make_wal_key (scanner.classify): not theirs.
        return f"shard {parsed.shard!r} is not the hash shard {shard_of(parsed.name)!r} of {parsed.name!r}"
    return None


def execute_plan(
    store: ObjectStore,
    registry: Registry,
    prefix: str,
    *,
    batch_size: int,
    clock: Clock,
    delete: Callable[[Sequence[str]], DeleteResult] | None = None,
    batches_max: int | None = None,
    tiered_prefix: str | None = None,
    cluster_id: uuid.UUID | None = None,
) -> DeleteReport:
    """Delete what the plan holds, batch by batch, until it is empty or a
    batch made no progress.  ``delete`` replaces ``store.delete_many`` (a
    no-op for dry runs and tests).  Segment keys are deleted only with a
    ``tiered_prefix`` and the ``cluster_id`` they must name."""
    if not 1 <= batch_size <= DELETE_BATCH_SIZE_MAX:
        raise ValueError(f"delete batch size must be in [1, {DELETE_BATCH_SIZE_MAX}], got {batch_size}")
    do_delete = delete or store.delete_many
    report = DeleteReport()
    start = clock.monotonic()
    skip: set[str] = set()  # failed this run: retried next cycle
    while batches_max is None or report.batches < batches_max:
        batch = [r for r in registry.planned(batch_size + len(skip)) if r.key not in skip][:batch_size]
        if not batch:
            break
        refused = {r.key: why for r in batch if (why := refusal(r.key, prefix, tiered_prefix, cluster_id)) is not None}
        if refused:
            for key, why in refused.items():
                log.error("walmgr refused to delete key=%s reason=%s", key, why)
            registry.unplan(list(refused), note="refused: " + "; ".join(sorted(set(refused.values())))[:200],
                            state=State.INVALID)  # fmt: skip
            report.refused.update(refused)
        send = [r for r in batch if r.key not in refused]
        if not send:
            continue
        sizes = {r.key: r.size for r in send}
        report.batches += 1
        try:
            result = do_delete([r.key for r in send])
        except ObjectStoreError as e:
            # Nothing confirmed: all stay planned.
            result = DeleteResult([], {r.key: str(e) for r in send})
        confirmed = [k for k in result.deleted if k in sizes]
        if confirmed:
            registry.record_deleted(confirmed, clock.wall_ms())
            report.deleted_files += len(confirmed)
            report.deleted_bytes += sum(sizes[k] for k in confirmed)
            if tiered_prefix is not None:
                segments = [k for k in confirmed if is_segment_key(k, tiered_prefix)]
                report.segment_files += len(segments)
                report.segment_bytes += sum(sizes[k] for k in segments)
        for key, err in result.errors.items():
            if key in sizes:
                report.failed[key] = err
                skip.add(key)
        unanswered = set(sizes) - set(confirmed) - set(result.errors)
        for key in unanswered:  # the store said nothing of it: treat as failed
            report.failed[key] = "no answer from the store"
            skip.add(key)
        if not confirmed:
            break  # no progress: back off until the next cycle
    report.seconds = clock.monotonic() - start
    if report.failed:
        log.warning("walmgr deletions failed files=%d (retried next cycle)", len(report.failed))
    return report
