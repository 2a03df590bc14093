"""The options a store is opened with (:meth:`partlog.store.MetadataStore.open`),
checked once, and kept so that :meth:`~partlog.store.MetadataStore.reopen`
opens the same store again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from partlog.kafka.producer_state import PRODUCER_ID_EXPIRATION_MS_DEFAULT
from partlog.store.journal import JOURNAL_SEGMENT_BYTES_DEFAULT
from partlog.store.layout import (
    CHECKPOINT_BACKLOG_GROUPS_MAX_DEFAULT,
    CHECKPOINT_GROUPS_MAX_DEFAULT,
    CHECKPOINT_INTERVAL_MS_DEFAULT,
    COMMIT_DEADLINE_MS_DEFAULT,
    GROUP_COMMIT_BATCHES_MAX,
    MAP_SIZE_BYTES_DEFAULT,
    MAP_SIZE_BYTES_MAX,
    MAP_SIZE_BYTES_MIN,
)


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """The options of :meth:`partlog.store.MetadataStore.open`; ValueError
    for a value out of range.

    ``clock`` returns milliseconds since the epoch (default: wall clock);
    ``monotonic`` returns seconds on a monotonic clock, for the checkpoint
    interval (default: the machine's).
    With ``sync=True`` every returned write is on disk.  With ``sync=False``
    a process crash loses nothing, but a machine crash or power loss may
    undo the last writes (LMDB's MDB_NOSYNC: the store stays intact only on
    a file system that preserves write order).  ``readonly``: inspect a
    store another process writes (following its journal).
    ``commit_deadline_ms``: batches of a WAL object older than this are
    refused (walmgr's age gate rests on it); ``producer_id_expiration_ms``:
    Kafka's ``producer.id.expiration.ms``.  ``map_size_bytes``: LMDB's
    initial map (it doubles when full); ``group_commit_batches_max``: the
    most batches one group commit takes.
    With ``auto_high_watermark=True`` (no replication) a commit moves the
    high watermark to the log end; with False the owner moves it with
    :meth:`~partlog.store.MetadataStore.set_high_watermark` as its replicas
    catch up.
    A commit is acknowledged once its group's journal record is written
    (and synced with ``sync``); a checkpoint applies durable groups to LMDB
    once ``checkpoint_groups_max`` wait or the oldest waited
    ``checkpoint_interval_ms``, in a background thread unless
    ``checkpoint_thread`` is False (then inline, by count only: the
    deterministic simulation's mode).  When the thread falls behind and
    ``checkpoint_backlog_groups_max`` groups wait, the commit stage runs the
    checkpoint itself before it acknowledges more (backpressure: the
    overlay's memory and read cost stay bounded); None means the larger of
    256 and 4 x ``checkpoint_groups_max`` (:attr:`backlog_groups_max`).
    ``journal_segment_bytes``: the size of each preallocated journal file.
    ``boot_id``: the machine's boot id (None: unknown), for
    :mod:`partlog.store.shutdown`'s unclean-shutdown rule.
    ``release_grace_ms``: a key released counts as referenced this long
    after (``partlog.store.release_grace``; 0: off, a broker's store sets it).
    """

    sync: bool = True
    readonly: bool = False
    commit_deadline_ms: int = COMMIT_DEADLINE_MS_DEFAULT
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT
    clock: Callable[[], int] | None = None
    monotonic: Callable[[], float] | None = None
    map_size_bytes: int = MAP_SIZE_BYTES_DEFAULT
    group_commit_batches_max: int = GROUP_COMMIT_BATCHES_MAX
    auto_high_watermark: bool = True
    checkpoint_groups_max: int = CHECKPOINT_GROUPS_MAX_DEFAULT
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT
    checkpoint_thread: bool = True
    journal_segment_bytes: int = JOURNAL_SEGMENT_BYTES_DEFAULT
    checkpoint_backlog_groups_max: int | None = None
    release_grace_ms: int = 0
    boot_id: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "commit_deadline_ms",
            "producer_id_expiration_ms",
            "group_commit_batches_max",
            "checkpoint_groups_max",
            "checkpoint_interval_ms",
        ):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.release_grace_ms < 0:
            raise ValueError(f"release_grace_ms must be >= 0, got {self.release_grace_ms}")
        if self.backlog_groups_max < self.checkpoint_groups_max:
            raise ValueError(
                f"checkpoint_backlog_groups_max must be >= checkpoint_groups_max ({self.checkpoint_groups_max}),"
                f" got {self.backlog_groups_max}"
            )
        if not MAP_SIZE_BYTES_MIN <= self.map_size_bytes <= MAP_SIZE_BYTES_MAX:
            # Below the minimum, creating the named databases alone fills the
            # map before the store can grow it.
            raise ValueError(
                f"map_size_bytes must be in [{MAP_SIZE_BYTES_MIN}, {MAP_SIZE_BYTES_MAX}], got {self.map_size_bytes}"
            )

    @property
    def backlog_groups_max(self) -> int:
        """The overlay's length at which the commit stage checkpoints itself."""
        if self.checkpoint_backlog_groups_max is None:
            return max(CHECKPOINT_BACKLOG_GROUPS_MAX_DEFAULT, 4 * self.checkpoint_groups_max)
        return self.checkpoint_backlog_groups_max
