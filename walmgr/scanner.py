"""walmgr's in-process scanner: learns about WAL objects by listing the bucket
and reading the footer of each object it has never seen.

The listing rules (the prefix fence, shard prefixes, the incremental
look-back, what one object is) are :mod:`walmgr.listing`'s, shared with the
Spark scan engine.  A full scan lists everything under ``<prefix>/``; live
records a full scan does not list become GONE, but only those created well
before the listing started (``gone_age_ms``), so an object still being
uploaded is never marked gone; a GONE key listed again is TRACKED again.

Only footers of unknown keys are read (one suffix GET each, at most
``FOOTER_READS_IN_FLIGHT_MAX`` at a time).  A bad object never raises: it is
recorded INVALID with the reason and is never deleted or read again.  Store
errors other than "not found" propagate (the scan is retried next cycle):
a credentials or network problem must not turn objects INVALID for good.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from partlog.kafka.records import TopicIdPartition
from partlog.runtime import Clock
from partlog.wal.key import ALL_SHARDS, OBJECT_KEY_BYTES_MAX
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import LIST_KEYS_MAX, ForwardingStore, ObjectInfo, ObjectStore, ObjectStoreError
from walmgr.config import FOOTER_READS_MAX_IN_FLIGHT_DEFAULT
from walmgr.listing import (
    GONE_AGE_MS_DEFAULT,
    INCREMENTAL_LOOKBACK_MS_DEFAULT,
    INVALID_REPORTED_MAX,
    NOT_UTF8_NOTE,
    classify,
    group_of,
    inspect_object,
    is_position_key,
    is_utf8,
    iter_pages,
    prefix_head,
    shard_list_prefix,
    shard_start_after,
)
from walmgr.model import ObjectRecord, Source, State
from walmgr.progress import ProgressSink, ScanProgress, fraction_after
from walmgr.registry import LIVE_STATES, Registry

log = logging.getLogger(__name__)

_SHARD_SET = frozenset(ALL_SHARDS)

# Footer reads (suffix GETs) in flight by default: walmgr's
# footer_reads_max_in_flight (S3 serves thousands of GETs a second per
# prefix; s3_requests_per_s_max caps the rate when the bucket is shared).
FOOTER_READS_IN_FLIGHT_MAX = FOOTER_READS_MAX_IN_FLIGHT_DEFAULT
# Shards listed concurrently by an incremental scan: 256 sequential LISTs of
# ~30 ms would take ~8 s of a 30 s cycle.
SHARD_LISTS_IN_FLIGHT_MAX = 8
# A local directory's listing is the scanning thread's own work: one at a
# time, in that thread.  Eight threads made an idle scan of 256 empty shards
# 45 ms instead of 5, all of it holding the interpreter a broker beside it
# (``partlog cluster``) serves Kafka requests with.
LOCAL_SHARD_LISTS_IN_FLIGHT_MAX = 1


def shard_lists_in_flight_for(store: ObjectStore) -> int:
    """How many shards an incremental scan of ``store`` lists at once:
    ``LOCAL_SHARD_LISTS_IN_FLIGHT_MAX`` for a local directory (through any
    forwarding wrappers), else ``SHARD_LISTS_IN_FLIGHT_MAX``."""
    while isinstance(store, ForwardingStore):
        store = store.inner
    return LOCAL_SHARD_LISTS_IN_FLIGHT_MAX if isinstance(store, LocalDirStore) else SHARD_LISTS_IN_FLIGHT_MAX


def register_notifications(
    registry: Registry,
    prefix: str,
    objects: Iterable[tuple[str, int, int, int, Sequence[TopicIdPartition]]],
    now_ms: int,
) -> list[ObjectRecord]:
    """Record brokers' upload notifications ``(key, size, created_ms,
    broker_id, partitions)`` as NOTIFICATION records, for keys still
    unknown, in one transaction; returns the records added.

    A notification is a hint, never trusted further than its key: one whose
    key is not a WAL key of ``prefix``, or whose created_ms or broker
    disagree with the key, is logged and ignored.
    """
    records: list[ObjectRecord] = []
    for key, size, created_ms, broker_id, partitions in objects:
        parsed = classify(key, prefix)
        if isinstance(parsed, str):
            log.warning("notification ignored key=%r reason=%s", key, parsed)
            continue
        if parsed.created_ms != created_ms or parsed.broker_id != broker_id or size <= 0:
            log.warning(
                "notification ignored key=%r reason=fields disagree with the key size=%d created_ms=%d broker=%d",
                key,
                size,
                created_ms,
                broker_id,
            )
            continue
        records.append(
            ObjectRecord(
                key, size, created_ms, broker_id, tuple(partitions), Source.NOTIFICATION, State.TRACKED, now_ms
            )
        )
    return registry.put_new(records) if records else []


def register_notification(
    registry: Registry,
    prefix: str,
    key: str,
    size: int,
    created_ms: int,
    broker_id: int,
    partitions: Sequence[TopicIdPartition],
    now_ms: int,
) -> ObjectRecord | None:
    """One notification (see :func:`register_notifications`): the record
    added, or None (known already, or ignored)."""
    added = register_notifications(registry, prefix, [(key, size, created_ms, broker_id, partitions)], now_ms)
    return added[0] if added else None


# ------------------------------------------------------------------ scanner


@dataclass(frozen=True, slots=True)
class ScanReport:
    keys_listed: int
    new_objects: int  # new TRACKED records
    # Newly found invalid keys with the reason (at most INVALID_REPORTED_MAX).
    invalid: tuple[tuple[str, str], ...]
    gone: int  # records marked GONE (full scans)
    seconds: float
    bytes_new: int  # bytes of the new TRACKED objects
    invalid_count: int = 0  # all newly found invalid keys
    revived: int = 0  # GONE records listed again, TRACKED again (full scans)
    # Seconds per stage, where the engine measures them (the Spark engine:
    # startup, snapshot, listing, footers, gone, merge); empty otherwise.
    stages: Mapping[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Tally:
    keys_listed: int = 0
    new_objects: int = 0
    bytes_new: int = 0
    invalid: list[tuple[str, str]] = field(default_factory=list)
    invalid_count: int = 0

    def add(self, other: _Tally) -> None:
        self.keys_listed += other.keys_listed
        self.new_objects += other.new_objects
        self.bytes_new += other.bytes_new
        self.invalid_count += other.invalid_count
        self.invalid.extend(other.invalid[: max(0, INVALID_REPORTED_MAX - len(self.invalid))])

    def report(self, seconds: float, gone: int = 0, revived: int = 0) -> ScanReport:
        invalid = tuple(self.invalid[:INVALID_REPORTED_MAX])
        return ScanReport(
            self.keys_listed, self.new_objects, invalid, gone, seconds, self.bytes_new, self.invalid_count, revived
        )


# An incremental scan whose first shards all fail stops after this many:
# the store is down, and trying all 256 shards would only take longer.
SHARD_FAILURES_BEFORE_GIVING_UP = 3


def _collect(futures: list[Future[ObjectRecord | None]]) -> list[ObjectRecord]:
    """The records of :meth:`Scanner._read_footers`' futures, in order.  The
    first failure is raised after every future is done or cancelled, so no
    read outlives the scan that started it."""
    out: list[ObjectRecord] = []
    try:
        for f in futures:
            rec = f.result()
            if rec is not None:
                out.append(rec)
    except BaseException:
        for f in futures:
            f.cancel()
        wait(futures)
        raise
    return out


class Scanner:
    """Scans ``store`` under ``prefix`` into ``registry``; ``clock`` stamps the
    records (wall ms) and times the scans (monotonic)."""

    def __init__(
        self,
        store: ObjectStore,
        registry: Registry,
        prefix: str,
        *,
        clock: Clock,
        lookback_ms: int = INCREMENTAL_LOOKBACK_MS_DEFAULT,
        gone_age_ms: int = GONE_AGE_MS_DEFAULT,
        page_keys_max: int = LIST_KEYS_MAX,
        footer_reads_in_flight_max: int = FOOTER_READS_IN_FLIGHT_MAX,
        shard_lists_in_flight_max: int = SHARD_LISTS_IN_FLIGHT_MAX,
    ) -> None:
        self.prefix = prefix_head(prefix)[:-1]
        if lookback_ms < 0 or gone_age_ms < 0:
            raise ValueError(f"lookback_ms ({lookback_ms}) and gone_age_ms ({gone_age_ms}) must be >= 0")
        if not 1 <= page_keys_max <= LIST_KEYS_MAX:
            raise ValueError(f"page_keys_max must be in [1, {LIST_KEYS_MAX}], got {page_keys_max}")
        if footer_reads_in_flight_max < 1 or shard_lists_in_flight_max < 1:
            raise ValueError("footer_reads_in_flight_max and shard_lists_in_flight_max must be >= 1")
        self.store = store
        self.registry = registry
        self.clock = clock
        self.lookback_ms = lookback_ms
        self.gone_age_ms = gone_age_ms
        self.page_keys_max = page_keys_max
        self.footer_reads_in_flight_max = footer_reads_in_flight_max
        self.shard_lists_in_flight_max = shard_lists_in_flight_max

    # ------------------------------------------------------------ common

    def _new_records(self, page: list[ObjectInfo], pool: ThreadPoolExecutor, tally: _Tally) -> list[ObjectRecord]:
        """Records for the unknown keys of ``page`` (footers read in ``pool``)."""
        return _collect(self._read_footers(page, pool, tally))

    def _read_footers(
        self, page: list[ObjectInfo], pool: ThreadPoolExecutor, tally: _Tally
    ) -> list[Future[ObjectRecord | None]]:
        """Start reading the footers of ``page``'s unknown keys in ``pool``:
        one future per key, for :func:`_collect`."""
        tally.keys_listed += len(page)
        recordable = []
        for o in page:
            if not is_utf8(o.key):
                # A local store can hold file names that are not UTF-8 (S3 keys
                # always are): reported by every scan, never recorded or deleted.
                shown = o.key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                self._note_invalid(tally, shown, NOT_UTF8_NOTE)
            elif len(o.key.encode("utf-8")) > OBJECT_KEY_BYTES_MAX:
                # Too long for the registry (and for any WAL key): reported
                # by every scan that lists it, never recorded or deleted.
                self._note_invalid(tally, o.key, f"longer than {OBJECT_KEY_BYTES_MAX} bytes: not a WAL key")
            else:
                recordable.append(o)
        known = self.registry.known(o.key for o in recordable)
        unknown = [o for o in recordable if o.key not in known]
        now = self.clock.wall_ms()
        cluster = self.registry.cluster_id
        return [pool.submit(inspect_object, self.store, o, self.prefix, now, cluster) for o in unknown]

    def _count_added(self, added: list[ObjectRecord], tally: _Tally) -> None:
        for rec in added:
            if rec.state == State.INVALID:
                self._note_invalid(tally, rec.key, rec.note)
                log.warning("invalid object under the prefix key=%r reason=%s", rec.key, rec.note)
            else:
                tally.new_objects += 1
                tally.bytes_new += rec.size

    @staticmethod
    def _note_invalid(tally: _Tally, key: str, reason: str) -> None:
        tally.invalid_count += 1
        if len(tally.invalid) < INVALID_REPORTED_MAX:
            tally.invalid.append((key, reason))

    # ------------------------------------------------------- incremental

    def incremental(self, shards: Iterable[str] | None = None) -> ScanReport:
        """List each shard from its stored position (less the look-back),
        record the unknown keys, advance the position; per page, records and
        position in one transaction."""
        chosen = ALL_SHARDS if shards is None else tuple(shards)
        for shard in chosen:
            shard_list_prefix(self.prefix, shard)  # refuse bad shard names before any request
        started = self.clock.monotonic()
        total = _Tally()
        failed: list[tuple[str, ObjectStoreError]] = []
        lock = threading.Lock()  # the counters below, shared by the listing threads
        succeeded = failures = 0
        given_up = threading.Event()

        def scan(shard: str, footers: ThreadPoolExecutor) -> _Tally | ObjectStoreError | None:
            # One shard's failure (a 503 on its LIST) must not cost the
            # others their progress: with 256 shards, a 1% error rate per
            # request would otherwise fail nine scans in ten and walmgr would
            # stop learning objects (found by the deterministic simulation).
            # A store that is down fails the first shards: then give up
            # rather than try all 256 (None: not tried).
            nonlocal succeeded, failures
            if given_up.is_set():
                return None
            try:
                tally = self._scan_shard(shard, footers)
            except ObjectStoreError as e:
                with lock:
                    failures += 1
                    if not succeeded and failures >= SHARD_FAILURES_BEFORE_GIVING_UP:
                        given_up.set()
                return e
            with lock:
                succeeded += 1
            return tally

        with (
            ThreadPoolExecutor(self.footer_reads_in_flight_max, thread_name_prefix="walmgr-footer") as footers,
            ThreadPoolExecutor(self.shard_lists_in_flight_max, thread_name_prefix="walmgr-list") as lists,
        ):
            # One list in flight: the shards in this thread, in turn (a
            # thread per list only adds hand-offs when listing is local work).
            tallies = (
                map(lambda s: scan(s, footers), chosen)
                if self.shard_lists_in_flight_max == 1
                else lists.map(lambda s: scan(s, footers), chosen)
            )
            for shard, got in zip(chosen, tallies, strict=True):
                if isinstance(got, ObjectStoreError):
                    failed.append((shard, got))
                elif got is not None:
                    total.add(got)
        if failed:
            shard, first = failed[0]
            raise ObjectStoreError(
                f"incremental scan: {len(chosen) - succeeded} of {len(chosen)} shards not scanned "
                f"({succeeded} advanced); shard {shard}: {first}",
                key=first.key,
                retriable=first.retriable,
            ) from first
        report = total.report(self.clock.monotonic() - started)
        log.info(
            "incremental scan shards=%d keys_listed=%d new_objects=%d invalid=%d bytes_new=%d seconds=%.3f",
            len(chosen),
            report.keys_listed,
            report.new_objects,
            report.invalid_count,
            report.bytes_new,
            report.seconds,
        )
        return report

    def _scan_shard(self, shard: str, footers: ThreadPoolExecutor) -> _Tally:
        tally = _Tally()
        position = self.registry.shard_position(shard)
        if position and not is_position_key(position, self.prefix, shard):
            # A position stored before positions were WAL keys only: list the
            # whole shard once (the gap behind it is closed).
            position = ""
        start = shard_start_after(self.prefix, shard, position, self.lookback_ms)
        for page in iter_pages(self.store, shard_list_prefix(self.prefix, shard), start, self.page_keys_max):
            records = self._new_records(page, footers, tally)
            # The look-back may list only keys behind the position: never move
            # it back.  Only a WAL key of this shard may be a position.
            new_position = max([position, *(o.key for o in page if is_position_key(o.key, self.prefix, shard))])
            moved = {shard: new_position} if new_position != position else None
            if records or moved:
                self._count_added(self.registry.put_new(records, shard_positions=moved), tally)
            position = new_position
        return tally

    # -------------------------------------------------------------- full

    def full(self, progress: ProgressSink | None = None) -> ScanReport:
        """List everything under the prefix: record unknown keys, mark live
        records that are no longer listed GONE, revive GONE ones that are;
        then set ``last_full_scan_ms`` (the listing's start).  ``progress``
        is called after each page (keys so far, keys/s, share done)."""
        started = self.clock.monotonic()
        start_ms = self.clock.wall_ms()
        created_before_ms = start_ms - self.gone_age_ms
        tally = _Tally()
        # Keys maybe gone; a dict as an ordered set.  Bounded by the records
        # that really vanished, not by the bucket: one group's listed keys
        # are held at a time.
        maybe_gone: dict[str, None] = {}
        seen: set[str] = set()
        revived = 0
        group: str | None = None
        listed: set[str] = set()

        def finish() -> None:
            nonlocal revived
            if group is None or group not in _SHARD_SET:
                return  # only shards hold WAL keys, hence records
            if group in seen:
                # The store listed this shard in two runs (out of order):
                # what this run lists exists after all.
                for key in listed:
                    maybe_gone.pop(key, None)
            else:
                seen.add(group)
                for rec in self.registry.records(LIVE_STATES, key_prefix=shard_list_prefix(self.prefix, group)):
                    if rec.key not in listed and rec.created_ms < created_before_ms:
                        maybe_gone[rec.key] = None
            back = self.registry.revive(
                rec.key
                for rec in self.registry.records({State.GONE}, key_prefix=shard_list_prefix(self.prefix, group))
                if rec.key in listed
            )
            if back:
                revived += len(back)
                log.warning("gone objects listed again keys=%s", back[:10])

        # Listing and footer reads overlap: a page's footers are read in
        # the pool while the next page is listed, and recorded once that
        # page's reads are queued behind them.  At most two pages of reads
        # are in flight: memory stays bounded.
        reading: list[Future[ObjectRecord | None]] = []
        with ThreadPoolExecutor(self.footer_reads_in_flight_max, thread_name_prefix="walmgr-footer") as footers:
            try:
                for page in iter_pages(self.store, prefix_head(self.prefix), "", self.page_keys_max):
                    previous, reading = reading, self._read_footers(page, footers, tally)
                    records = _collect(previous)
                    if records:
                        self._count_added(self.registry.put_new(records), tally)
                    for info in page:
                        g = group_of(info.key, self.prefix)
                        if g != group:
                            finish()
                            group, listed = g, set()
                        listed.add(info.key)
                    if progress is not None:
                        progress(
                            ScanProgress(
                                tally.keys_listed,
                                tally.new_objects,
                                self.clock.monotonic() - started,
                                fraction_after(group),
                            )
                        )
                records = _collect(reading)
                reading = []
                if records:
                    self._count_added(self.registry.put_new(records), tally)
            finally:
                for f in reading:
                    f.cancel()
            finish()
        for shard in ALL_SHARDS:
            if shard not in seen:  # nothing listed there at all
                for rec in self.registry.records(LIVE_STATES, key_prefix=shard_list_prefix(self.prefix, shard)):
                    if rec.created_ms < created_before_ms:
                        maybe_gone[rec.key] = None
        gone = (
            self.registry.mark_gone(maybe_gone, self.clock.wall_ms(), created_before_ms=created_before_ms)
            if maybe_gone
            else []
        )
        if gone:
            log.warning("objects gone from the store (deleted by someone else) count=%d keys=%s", len(gone), gone[:10])
        self.registry.meta_set("last_full_scan_ms", start_ms)
        report = tally.report(self.clock.monotonic() - started, gone=len(gone), revived=revived)
        log.info(
            "full scan keys_listed=%d new_objects=%d invalid=%d gone=%d revived=%d bytes_new=%d seconds=%.3f",
            report.keys_listed,
            report.new_objects,
            report.invalid_count,
            report.gone,
            report.revived,
            report.bytes_new,
            report.seconds,
        )
        return report
