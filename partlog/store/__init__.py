"""MetadataStore: one broker's metadata logs, in one LMDB environment.

Each partition this broker leads (or, later, follows) has a metadata log of
entries ``[patched 61-byte v2 batch header | WAL reference]``, sequenced exactly
as a Kafka partition leader sequences its log.  The API mirrors KIP-1164's
BatchCoordinator, per leader (see :mod:`partlog.kafka.records`).

The layout on disk is :mod:`partlog.store.layout`.

Commits go through a group commit: concurrent ``commit_file`` callers queue;
one of them sequences the queued calls into a group against the in-memory
state, and the group is made durable by ONE journal append (one fsync with
``sync=True``) before anyone is answered; checkpoints apply durable groups to
LMDB later, in large transactions.  Every other write (topics, epochs,
truncation, DeleteRecords, retention, follower appends) runs exclusively:
the pipeline drained, the journal applied, one LMDB write transaction.  Each
operation validates everything before it writes anything, so one caller's bad
input never reaches another caller's commit; an exclusive write stages its
changes and reaches the caches only once committed.

Readers never read the caches: they read LMDB plus the overlay of durable,
not yet applied groups (:mod:`partlog.store.view`), so a ``readonly=True``
store in another process, which follows the journal, sees the same.

Replication (Kafka-style, per partition): the leader's :meth:`MetadataStore.read_log`
hands out entries as :class:`ReplicatedEntry` values; a follower's store
appends them with :meth:`MetadataStore.append_replicated` in the leader's exact
offsets and epochs, and cuts a divergent suffix with
:meth:`MetadataStore.truncate_to` or restarts with :meth:`MetadataStore.reset_to`.
With ``auto_high_watermark=False`` the owner drives the high watermark
(:meth:`MetadataStore.set_high_watermark`) from its replicas' progress; that
value lives in memory and reaches disk with the next write of the partition.

Where the code is (each module one concern; :class:`MetadataStore` combines
them and is the only public class):

* :mod:`~partlog.store.layout`: database names, key and value formats, the
  decoded partition state and log entry;
* :mod:`~partlog.store.base`: environment, transactions, caches, staging;
* :mod:`~partlog.store.sequencing`: the commit path (``commit_file``);
* :mod:`~partlog.store.checkpoint`: the journal append per group (the
  acknowledgement), checkpoints into LMDB, recovery;
* :mod:`~partlog.store.journal`: the journal files;
* :mod:`~partlog.store.view`: what readers see (LMDB plus the overlay);
* :mod:`~partlog.store.log`: log entries;
* :mod:`~partlog.store.producers`: producer state kept per partition;
* :mod:`~partlog.store.index`: file references (what walmgr asks about);
* :mod:`~partlog.store.reads`: FindBatches, ListOffsets, log bounds, ``read_log``;
* :mod:`~partlog.store.replication`: the follower API and the high watermark;
* :mod:`~partlog.store.epochs`: the leader-epoch cache;
* :mod:`~partlog.store.retention`: DeleteRecords and retention;
* :mod:`~partlog.store.topics`: topics and the cluster binding;
* :mod:`~partlog.store.check`: the invariant walker.
"""

from __future__ import annotations

from partlog.kafka.records import LogRead, ReplicatedEntry
from partlog.store.check import CheckMixin
from partlog.store.checkpoint import CheckpointMixin
from partlog.store.layout import (
    COMMIT_DEADLINE_MS_DEFAULT,
    ENTRY_SIZE,
    FORMAT_VERSION,
    GROUP_COMMIT_BATCHES_MAX,
    MAP_SIZE_BYTES_DEFAULT,
    MAP_SIZE_BYTES_MAX,
    MAP_SIZE_BYTES_MIN,
    CorruptEntryError,
    OffsetOutOfRangeError,
    ReplicationError,
    StoreError,
)
from partlog.store.replication import ReplicationMixin
from partlog.store.retention import RetentionMixin
from partlog.store.sequencing import SequencingMixin
from partlog.store.topics import TopicsMixin

__all__ = [
    "COMMIT_DEADLINE_MS_DEFAULT",
    "ENTRY_SIZE",
    "FORMAT_VERSION",
    "GROUP_COMMIT_BATCHES_MAX",
    "MAP_SIZE_BYTES_DEFAULT",
    "MAP_SIZE_BYTES_MAX",
    "MAP_SIZE_BYTES_MIN",
    "CorruptEntryError",
    "LogRead",
    "MetadataStore",
    "OffsetOutOfRangeError",
    "ReplicatedEntry",
    "ReplicationError",
    "StoreError",
]


class MetadataStore(SequencingMixin, CheckpointMixin, ReplicationMixin, RetentionMixin, TopicsMixin, CheckMixin):
    """The metadata logs of all partitions of one broker (see the package doc).

    The API mirrors KIP-1164's BatchCoordinator, per leader.  Thread-safe:
    any number of threads may call any method; writes from concurrent callers
    share transactions (group commit).
    """
