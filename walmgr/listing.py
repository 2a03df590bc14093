"""walmgr's listing rules: what a WAL key of a prefix is, how a bucket is
listed (shard by shard, or all of it), and what one listed object is (its
footer read into a registry record).

The in-process scanner (:mod:`walmgr.scanner`) and the Spark job
(``spark/scan_job.py``) both list with these functions, so both engines have
identical semantics; this module is the only part of walmgr the job imports.
The rules:

* Every listing prefix ends with ``/``: ``wal/`` never matches ``wal-old/``,
  ``wal2/`` or ``walx``, so nothing outside the configured prefix is read,
  recorded or (later) deleted.
* An incremental scan lists each shard ``<prefix>/<shard>/`` after the last
  key it listed there, minus a look-back (``lookback_ms`` of created_ms):
  keys in a shard sort by created_ms, but an upload that finishes late, or a
  broker whose clock is behind, lands behind the position.  The look-back
  costs no request (the same LIST pages, a few more keys) and known keys are
  filtered before any GET.  Keys further behind are found by the full scan.
* A bad object never raises: :func:`inspect_object` makes it an INVALID
  record with the reason.  Store errors other than "not found" propagate.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

from partlog.store import COMMIT_DEADLINE_MS_DEFAULT
from partlog.wal.key import ALL_SHARDS, WalKey, WalKeyError, parse_wal_key, shard_of
from partlog.wal.objectstore import (
    LIST_KEYS_MAX,
    InvalidKeyError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreError,
    RangeNotSatisfiableError,
)
from partlog.wal.segment import WalFormatError, read_footer
from walmgr.config import GRACE_MS_DEFAULT, MAX_CLOCK_SKEW_MS_DEFAULT
from walmgr.model import ObjectRecord, Source, State

log = logging.getLogger(__name__)

_SHARD_SET = frozenset(ALL_SHARDS)
# An incremental scan re-lists this much of created_ms behind each shard's
# position: the commit deadline plus the clock skew (the defaults), past
# which an object can never be committed anyway.
INCREMENTAL_LOOKBACK_MS_DEFAULT = COMMIT_DEADLINE_MS_DEFAULT + MAX_CLOCK_SKEW_MS_DEFAULT
# A full scan marks GONE only objects created this long before its listing
# started: the default age gate (commit deadline + skew + grace), so an
# upload still in flight is never marked gone.
GONE_AGE_MS_DEFAULT = COMMIT_DEADLINE_MS_DEFAULT + MAX_CLOCK_SKEW_MS_DEFAULT + GRACE_MS_DEFAULT
# Invalid keys named in one ScanReport (all are counted and recorded).
INVALID_REPORTED_MAX = 1000


# ------------------------------------------------------------------ key rules


def prefix_head(prefix: str) -> str:
    """``<prefix>/``: what every key walmgr handles starts with."""
    clean = prefix.strip("/")
    if not clean:
        # The fence around everything walmgr reads and deletes.
        raise ValueError("the WAL key prefix must not be empty")
    return clean + "/"


def shard_list_prefix(prefix: str, shard: str) -> str:
    """``<prefix>/<shard>/``, always with the trailing slash."""
    if shard not in _SHARD_SET:
        raise ValueError(f"shard {shard!r} is not two lowercase hex digits")
    return f"{prefix_head(prefix)}{shard}/"


def shard_start_after(prefix: str, shard: str, position: str, lookback_ms: int) -> str:
    """Where an incremental listing of ``shard`` starts: ``lookback_ms`` of
    created_ms before the WAL key ``position`` (the last key listed there),
    or ``position`` itself when it is not a WAL key of this shard."""
    if not position or lookback_ms <= 0:
        return position
    parsed = classify(position, prefix)
    if isinstance(parsed, str) or parsed.shard != shard:
        return position
    # "<prefix>/<shard>/<13 digits>" sorts before every key of that
    # millisecond (they continue with "-").
    return f"{shard_list_prefix(prefix, shard)}{max(0, parsed.created_ms - lookback_ms):013d}"


def group_of(key: str, prefix: str) -> str:
    """The first path component after ``<prefix>/`` (a shard for WAL keys):
    a full listing sees each group's keys together."""
    return key[len(prefix_head(prefix)) :].split("/", 1)[0]


def classify(key: str, prefix: str) -> WalKey | str:
    """The parsed WAL key of ``prefix``, or why ``key`` is not one."""
    head = prefix_head(prefix)
    if not key.startswith(head):
        return f"not under {head!r}"
    try:
        parsed = parse_wal_key(key)
    except WalKeyError as e:
        return f"not a WAL key: {e}"
    if parsed.prefix != head[:-1]:
        return f"a WAL key of prefix {parsed.prefix!r}, not {head[:-1]!r}"
    if parsed.shard != shard_of(parsed.name):
        # Brokers make keys with make_wal_key; anything else is not theirs.
        return f"shard {parsed.shard!r} is not the hash shard {shard_of(parsed.name)!r} of {parsed.name!r}"
    return parsed


# ------------------------------------------------------------------- listing


def iter_pages(
    store: ObjectStore,
    list_prefix: str,
    start_after: str = "",
    max_keys: int = LIST_KEYS_MAX,
    *,
    first_page_keys: int | None = None,
) -> Iterator[list[ObjectInfo]]:
    """The pages of a listing of ``list_prefix`` after ``start_after``.

    Keys a store returns outside ``list_prefix`` are dropped (never
    trusted); a listing that does not advance raises a retriable
    :class:`ObjectStoreError` instead of looping.  Keys are not required to
    sort after ``start_after``: SeaweedFS orders some non-WAL keys
    differently (tests/objectstore_contract.py), and dropping a key
    would make a full scan think it gone.

    ``first_page_keys`` starts with smaller pages, growing eightfold up to
    ``max_keys``: for a listing usually stopped after its first key, where a
    full page costs the store the time to find 1000 keys.
    """
    if not list_prefix.endswith("/"):
        raise ValueError(f"listing prefix {list_prefix!r} must end with '/'")
    after = start_after
    page_keys = max_keys if first_page_keys is None else max(1, min(first_page_keys, max_keys))
    while True:
        page = store.list_page(list_prefix, after, page_keys)
        page_keys = min(max_keys, page_keys * 8)
        objects = [o for o in page.objects if o.key.startswith(list_prefix)]
        if len(objects) != len(page.objects):
            log.warning(
                "store listed keys outside the request prefix=%s dropped=%d",
                list_prefix,
                len(page.objects) - len(objects),
            )
        if objects:
            yield objects
        if not page.is_truncated or not page.objects:
            return
        last = page.objects[-1].key
        if last == after:
            raise ObjectStoreError(
                f"{store.describe()}: listing of {list_prefix} did not advance past {after!r}", retriable=True
            )
        after = last


def list_shard(
    store: ObjectStore, prefix: str, shard: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX
) -> Iterator[ObjectInfo]:
    """Every object under ``<prefix>/<shard>/`` after ``start_after``."""
    for page in iter_pages(store, shard_list_prefix(prefix, shard), start_after, max_keys):
        yield from page


def list_all(store: ObjectStore, prefix: str, max_keys: int = LIST_KEYS_MAX) -> Iterator[ObjectInfo]:
    """Every object under ``<prefix>/``."""
    for page in iter_pages(store, prefix_head(prefix), "", max_keys):
        yield from page


# ---------------------------------------------------------------- one object


NOT_UTF8_NOTE = "key is not UTF-8: not a WAL key"


def is_position_key(key: str, prefix: str, shard: str) -> bool:
    """May ``key`` be ``shard``'s incremental position: a WAL key of this
    prefix and shard.  Regression (found through a CI flake): a key that is
    not a WAL key but sorts after WAL names (``wal/00/garbage``) carried the
    position past new WAL keys, which then waited for the next full scan."""
    if not is_utf8(key):
        return False
    parsed = classify(key, prefix)
    return not isinstance(parsed, str) and parsed.shard == shard


def is_utf8(key: str) -> bool:
    """False for a key holding lone surrogates: how Python spells bytes of a
    file name that are not UTF-8 (os.fsdecode's surrogateescape)."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def invalid_record(
    info: ObjectInfo, reason: str, now_ms: int, parsed: WalKey | None = None, cluster_id: uuid.UUID | None = None
) -> ObjectRecord:
    return ObjectRecord(
        info.key,
        info.size,
        parsed.created_ms if parsed else -1,
        parsed.broker_id if parsed else -1,
        (),
        Source.SCAN,
        State.INVALID,
        now_ms,
        note=reason,
        cluster_id=cluster_id,
    )


def inspect_object(
    store: ObjectStore, info: ObjectInfo, prefix: str, now_ms: int, cluster_id: uuid.UUID | None = None
) -> ObjectRecord | None:
    """The record of a listed object: TRACKED with the footer's partitions
    for a WAL segment (one suffix GET), INVALID with the reason for a bad
    key or a bad segment, None if the object vanished meanwhile.

    The footer must pass :func:`partlog.wal.segment.parse_footer`'s checks
    (it accounts for the whole batch area) and name a cluster: ``cluster_id``
    when given (the registry's), else any (the record keeps it, and the
    decision core checks it against the registry's before any deletion).
    A footer naming no cluster, or another, makes the object INVALID:
    reported, never deleted.

    Raises :class:`ObjectStoreError` for store failures (retriable or not):
    the object may be fine, so it is not recorded and the scan is retried.
    """
    parsed = classify(info.key, prefix)
    if isinstance(parsed, str):
        return invalid_record(info, parsed, now_ms)
    try:
        footer, size = read_footer(store, info.key)
    except ObjectNotFoundError:
        return None
    except (WalFormatError, RangeNotSatisfiableError, InvalidKeyError) as e:
        return invalid_record(info, f"not a WAL segment: {e}", now_ms, parsed)
    if footer.cluster_id is None:
        return invalid_record(info, "footer names no cluster", now_ms, parsed)
    if cluster_id is not None and footer.cluster_id != cluster_id:
        return invalid_record(
            info,
            f"footer names cluster {footer.cluster_id}, this registry manages cluster {cluster_id}",
            now_ms,
            parsed,
            footer.cluster_id,
        )
    # The footer's created_ms is when the segment was opened, the key's when
    # it was closed and named (the commit deadline counts from the later one).
    if footer.created_ms > parsed.created_ms or footer.broker_id != parsed.broker_id:
        return invalid_record(
            info,
            f"footer says broker {footer.broker_id} created_ms {footer.created_ms}, "
            f"the key says broker {parsed.broker_id} created_ms {parsed.created_ms}",
            now_ms,
            parsed,
        )
    return ObjectRecord(
        info.key,
        size,
        parsed.created_ms,
        parsed.broker_id,
        tuple(r.topic_id_partition for r in footer.partitions),
        Source.SCAN,
        State.TRACKED,
        now_ms,
        cluster_id=footer.cluster_id,
    )
