"""walmgr's gate for tiered segments (docs/design/tiered-gate.md): what a
key under ``<tiered prefix>/`` is, the listing that records them, and the
sans-IO rules that split a round of segment candidates.

A segment is three objects of one stem (``<stem>.log``, ``.index``,
``.timeindex``, :func:`partlog.wal.key.parse_segment_key`); the ``.log`` is
the unit.  Its record takes everything from the key, which names the
cluster (a Kafka ``.log`` has no footer): the partition to ask, the
``created_ms`` the swap deadline counts from, the cluster.  A key that does
not parse, or names another cluster, is INVALID: reported, never deleted.

* **.log candidates** go through the WAL gate's questions (the partition's
  leader and ISR, then every broker): the decision core in
  :mod:`walmgr.decide` takes their records as it takes WAL records.
* **Index objects** are never asked about: nothing references a segment
  but by its ``.log`` key (a swap names the ``.log``, and happens only after
  the ``.log`` was written, the copy's last PUT).  An index is deleted once
  its ``.log`` is gone: the registry holds no live record of the ``.log`` and
  the store says it does not exist (:func:`leftover_verdict`), so the
  ``.log`` always goes first and "a ``.log`` exists" keeps meaning
  "complete".  Past the age gate a missing ``.log`` can never be swapped in
  (the leader's swap deadline), so a ``.log`` written later is an orphan too.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from partlog.kafka.records import TopicIdPartition
from partlog.wal.key import LOG_SUFFIX, OBJECT_KEY_BYTES_MAX, SegmentKey, SegmentKeyError, parse_segment_key
from partlog.wal.objectstore import LIST_KEYS_MAX, ObjectInfo, ObjectNotFoundError, ObjectStore, ObjectStoreError
from walmgr.listing import INVALID_REPORTED_MAX, is_utf8, iter_pages, prefix_head
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import LIVE_STATES, Registry

log = logging.getLogger(__name__)

# States in which a .log's record keeps its indexes: it may still be
# referenced (tracked, candidate), is about to be deleted (planned), or is
# kept for good (invalid).
_LOG_KEEPS_INDEXES = LIVE_STATES | {State.INVALID}


def is_segment_key(key: str, tiered_prefix: str) -> bool:
    """Under ``<tiered prefix>/``: a segment's fence (parsed or not)."""
    return key.startswith(prefix_head(tiered_prefix))


def classify_segment(key: str, tiered_prefix: str, cluster_id: uuid.UUID | None) -> SegmentKey | str:
    """The parsed segment key of ``tiered_prefix`` and cluster ``cluster_id``,
    or why ``key`` is not one (None: no cluster known, nothing is one)."""
    head = prefix_head(tiered_prefix)
    if not key.startswith(head):
        return f"not under {head!r}"
    try:
        parsed = parse_segment_key(key)
    except SegmentKeyError as e:
        return f"not a segment key: {e}"
    if parsed.prefix != head[:-1]:
        return f"a segment key of prefix {parsed.prefix!r}, not {head[:-1]!r}"
    if cluster_id is None:
        return "no cluster id known: a segment key cannot be checked"
    if parsed.cluster_id != cluster_id:
        # A clone of this cluster (same topic ids) writing to the same
        # prefix: its brokers' "not referenced" is no evidence here.
        return f"the key names cluster {parsed.cluster_id}, this registry manages cluster {cluster_id}"
    return parsed


def segment_record(info: ObjectInfo, tiered_prefix: str, now_ms: int, cluster_id: uuid.UUID | None) -> ObjectRecord:
    """The record of a listed object under the tiered prefix: TRACKED with
    the key's partition and cluster, or INVALID with the reason."""
    parsed = classify_segment(info.key, tiered_prefix, cluster_id)
    if isinstance(parsed, str):
        return ObjectRecord(info.key, info.size, -1, -1, (), Source.SCAN, State.INVALID, now_ms, note=parsed)
    tp = TopicIdPartition(parsed.topic_id, parsed.partition)
    # broker_id -1: a segment's key names no uploader (the swap's row does).
    return ObjectRecord(
        info.key, info.size, parsed.created_ms, -1, (tp,), Source.SCAN, State.TRACKED, now_ms,
        cluster_id=parsed.cluster_id,
    )  # fmt: skip


@dataclass(slots=True)
class SegmentScanReport:
    keys_listed: int = 0
    new_objects: int = 0
    invalid: list[tuple[str, str]] = field(default_factory=list)  # at most INVALID_REPORTED_MAX
    invalid_count: int = 0
    gone: int = 0

    def note_invalid(self, key: str, why: str) -> None:
        self.invalid_count += 1
        if len(self.invalid) < INVALID_REPORTED_MAX:
            self.invalid.append((key, why))


def scan_segments(
    store: ObjectStore,
    registry: Registry,
    tiered_prefix: str,
    *,
    now_ms: int,
    gone_age_ms: int,
    page_keys_max: int = LIST_KEYS_MAX,
) -> SegmentScanReport:
    """List everything under ``<tiered prefix>/``: record the unknown keys
    (no GET: the key says everything), and mark GONE the live records of the
    prefix that were not listed and were created ``gone_age_ms`` before the
    listing began (an upload in flight is never marked gone).

    Memory: the listed keys of the prefix are held once (a set of strings,
    three per segment), bounded by the bucket's segments, which are large.
    """
    report = SegmentScanReport()
    cluster = registry.cluster_id
    if cluster is None:
        # A segment key is checked against the registry's cluster when it is
        # recorded; before the registry is bound it could only be INVALID for
        # good.  Nothing is decided without a cluster anyway.
        log.info("tiered prefix not listed: the registry names no cluster yet")
        return report
    listed: set[str] = set()
    for page in iter_pages(store, prefix_head(tiered_prefix), "", page_keys_max):
        report.keys_listed += len(page)
        recordable: list[ObjectInfo] = []
        for o in page:
            if not is_utf8(o.key) or len(o.key.encode()) > OBJECT_KEY_BYTES_MAX:
                shown = o.key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                report.note_invalid(shown, "not UTF-8, or too long: not a segment key")
                continue
            listed.add(o.key)
            recordable.append(o)
        known = registry.known(o.key for o in recordable)
        added = registry.put_new(
            [segment_record(o, tiered_prefix, now_ms, cluster) for o in recordable if o.key not in known]
        )
        for rec in added:
            if rec.state == State.INVALID:
                report.note_invalid(rec.key, rec.note)
                log.warning("invalid object under the tiered prefix key=%r reason=%s", rec.key, rec.note)
            else:
                report.new_objects += 1
    created_before_ms = now_ms - gone_age_ms
    head = prefix_head(tiered_prefix)
    maybe_gone = [
        r.key
        for r in registry.records(LIVE_STATES, key_prefix=head)
        if r.key not in listed and r.created_ms < created_before_ms
    ]
    if maybe_gone:
        gone = registry.mark_gone(maybe_gone, now_ms, created_before_ms=created_before_ms)
        report.gone = len(gone)
    back = registry.revive(r.key for r in registry.records({State.GONE}, key_prefix=head) if r.key in listed)
    if back:
        log.warning("gone segment objects listed again keys=%s", back[:10])
    return report


# ------------------------------------------------------------ one round


@dataclass(frozen=True, slots=True)
class SegmentRound:
    """A round's segment candidates, split: ``.log`` records to ask about;
    index leftovers whose ``.log`` must be checked absent; indexes waiting
    for their ``.log`` (not decided this round); keys kept, with the reason."""

    logs: list[ObjectRecord]
    leftovers: list[ObjectRecord]
    waiting: list[str]
    kept: dict[str, str]


def split_round(records: Iterable[ObjectRecord], log_state: Callable[[str], State | None]) -> SegmentRound:
    """Split segment candidates; ``log_state(key)`` is the registry's state
    of a ``.log`` key (None: no record)."""
    logs: list[ObjectRecord] = []
    leftovers: list[ObjectRecord] = []
    waiting: list[str] = []
    kept: dict[str, str] = {}
    for r in records:
        try:
            parsed = parse_segment_key(r.key)
        except SegmentKeyError as e:  # a record the scan would have made INVALID
            kept[r.key] = f"not a segment key: {e}"
            continue
        if parsed.suffix == LOG_SUFFIX:
            logs.append(r)
        elif log_state(parsed.stem + LOG_SUFFIX) in _LOG_KEEPS_INDEXES:
            waiting.append(r.key)  # the .log goes first
        else:
            leftovers.append(r)
    return SegmentRound(logs, leftovers, waiting, kept)


def leftover_verdict(store: ObjectStore, record: ObjectRecord) -> str | None:
    """None when ``record`` (an index past the age gate) may be deleted:
    the store says its ``.log`` does not exist.  Otherwise why it is kept
    (the ``.log`` exists, not yet recorded; or the store did not say)."""
    log_key = parse_segment_key(record.key).stem + LOG_SUFFIX
    try:
        store.head(log_key)
    except ObjectNotFoundError:
        return None
    except ObjectStoreError as e:
        return f"the store did not say whether {log_key} exists: {e}"
    return f"its .log {log_key} exists: the .log goes first"


__all__ = [
    "SegmentRound",
    "SegmentScanReport",
    "classify_segment",
    "is_segment_key",
    "leftover_verdict",
    "scan_segments",
    "segment_record",
    "split_round",
]
