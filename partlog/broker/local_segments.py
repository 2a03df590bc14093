"""Replicas' local copies of recent tiered segments (KIP-1163's third fetch
policy; docs/design/tiered-reads.md, "Local copies").

Every ``interval_ms``, for every partition this broker serves (leader or
follower), the newest segment rows whose sizes fit
``partition_bytes_max`` (and all of them ``total_bytes_max``) are kept as
files under ``root``: :func:`partlog.fetch.local_copies.plan_local_copies`
decides, this shell downloads (one GET of the whole ``.log`` each, at most
``FETCH_BYTES_PER_PASS_MAX`` a pass) and deletes the files of rows that
fell out (a newer segment took the room, retention dropped the row, the
broker stopped serving the partition).  :meth:`LocalSegments.read` answers
a fetch's read of a held key from disk, so a consumer reading recent
history from this replica costs no GET.

A copy is written to a temporary name and renamed once whole and of the
row's size, so a file under its final name is complete; ``root`` is emptied
at start (copies are a cache, rebuilt from the rows).  A segment is
immutable, so a copy is never stale; a read racing the deletion of its file
falls back to the fetch cache and the store.

The loop starts with the builder's (a topic enables tiering), so a broker
without tiered topics runs nothing new; ``partition_bytes_max`` 0 turns it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
from collections.abc import Callable

from partlog.broker.metrics import BrokerMetrics
from partlog.broker.tasks import Tasks
from partlog.fetch.local_copies import LocalCopy, plan_local_copies
from partlog.kafka.records import TopicIdPartition
from partlog.replication.manager import ReplicaManager
from partlog.store import MetadataStore
from partlog.wal.objectstore import ObjectStore

log = logging.getLogger(__name__)

# KIP-1163 leaves N to the operator: one segment as the builder makes them
# (64 MiB) per partition, and 1 GiB in all, by default.
LOCAL_SEGMENT_BYTES_PER_PARTITION_DEFAULT = 64 << 20
LOCAL_SEGMENT_BYTES_MAX_DEFAULT = 1 << 30
# Downloads per pass, so a pass stays short and a new replica fills up
# over several.
FETCH_BYTES_PER_PASS_MAX = 256 << 20
# Rows read per partition per pass (from the oldest one wanted last pass).
ROWS_READ_MAX = 1000


class LocalSegments:
    """One broker's local segment copies (module doc)."""

    def __init__(
        self,
        root: str,
        store: MetadataStore,
        replicas: ReplicaManager,
        objects: ObjectStore,
        *,
        metrics: BrokerMetrics,
        tasks: Tasks,
        stopping: Callable[[], bool],
        interval_ms: int,
        partition_bytes_max: int = LOCAL_SEGMENT_BYTES_PER_PARTITION_DEFAULT,
        total_bytes_max: int = LOCAL_SEGMENT_BYTES_MAX_DEFAULT,
    ) -> None:
        if interval_ms <= 0 or partition_bytes_max < 0 or total_bytes_max < 0:
            raise ValueError("interval_ms must be > 0 and the byte bounds >= 0")
        self.root = root
        self.store = store
        self.replicas = replicas
        self.objects = objects
        self.metrics = metrics
        self.tasks = tasks
        self.interval_ms = interval_ms
        self.partition_bytes_max = partition_bytes_max
        self.total_bytes_max = total_bytes_max
        self._stopping = stopping
        self._started = False
        self.held: dict[str, LocalCopy] = {}
        # tp -> the start offset to read its rows from (the oldest wanted).
        self._from: dict[TopicIdPartition, int] = {}

    @property
    def enabled(self) -> bool:
        return self.partition_bytes_max > 0 and self.total_bytes_max > 0

    def ensure_started(self) -> None:
        if self.enabled and not self._started and not self._stopping():
            self._started = True
            shutil.rmtree(self.root, ignore_errors=True)
            os.makedirs(self.root)
            self.tasks.spawn(self._run())

    def holds(self, key: str) -> bool:
        return key in self.held

    def read(self, key: str, offset: int, length: int) -> bytes | None:
        """Bytes ``[offset, offset + length)`` of the held copy of ``key``
        (fewer past its end, as a ranged GET), or None when not held."""
        if key not in self.held:
            return None
        try:
            with open(self._path(key), "rb") as f:
                data = os.pread(f.fileno(), length, offset)
        except FileNotFoundError:
            return None  # deleted since: the cache or the store answers
        self.metrics.local_segment_hits.inc()
        return data

    def _path(self, key: str) -> str:
        # Keys hold '/': a file per key, named by its hash.
        return os.path.join(self.root, hashlib.sha256(key.encode()).hexdigest())

    async def _run(self) -> None:
        while not self._stopping():
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.run_once()
            except Exception:  # the loop outlives one bad pass
                log.exception("local segment copies: pass failed")

    async def run_once(self) -> None:
        rows = await asyncio.to_thread(self._rows)
        plan = plan_local_copies(
            rows,
            self.held,
            partition_bytes_max=self.partition_bytes_max,
            total_bytes_max=self.total_bytes_max,
            fetch_bytes_max=FETCH_BYTES_PER_PASS_MAX,
        )
        for key in plan.delete:
            del self.held[key]
            await asyncio.to_thread(_remove, self._path(key))
        for copy in plan.fetch:
            if self._stopping():
                break
            try:
                await asyncio.to_thread(self._download, copy)
            except Exception as e:  # the next pass tries again
                self.metrics.local_segment_download_errors.inc()
                log.warning("local copy of %s failed: %s", copy.key, e)
                continue
            self.held[copy.key] = copy
            self.metrics.local_segment_downloads.inc()
        self.metrics.local_segment_bytes.set(sum(c.size for c in self.held.values()))

    def _rows(self) -> dict[TopicIdPartition, list[tuple[str, int]]]:
        """Each served partition's rows from where the last pass left off."""
        out: dict[TopicIdPartition, list[tuple[str, int]]] = {}
        hints: dict[TopicIdPartition, int] = {}
        for topic_id, (_, partitions) in self.store.topics().items():
            for p in range(partitions):
                tp = TopicIdPartition(topic_id, p)
                if not self.replicas.serves(tp):
                    continue
                since = self._from.get(tp, 0)
                found = self.store.segments(tp, since, ROWS_READ_MAX)
                if not found:
                    continue
                if len(found) == ROWS_READ_MAX:
                    # A long history: read on from its last row next pass,
                    # and hold what is held meanwhile.
                    hints[tp] = found[-1].start_offset
                    out[tp] = [(c.key, c.size) for c in self.held.values() if c.topic_id_partition == tp]
                    continue
                out[tp] = [(r.object_key, r.size) for r in found]
                if since and found[0].start_offset != since:
                    continue  # the row read from went (retention, a truncation): from 0 next pass
                # Rows only come after the last: next pass reads from the
                # oldest that can still fit.
                hints[tp] = found[-1].start_offset
                used = 0
                for r in reversed(found):
                    used += r.size
                    if used > self.partition_bytes_max:
                        break
                    hints[tp] = r.start_offset
        self._from = hints
        return out

    def _download(self, copy: LocalCopy) -> None:
        data = self.objects.get(copy.key)
        if len(data) != copy.size:
            raise ValueError(f"{copy.key}: {len(data)} bytes, the row says {copy.size}")
        path = self._path(copy.key)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


__all__ = ["LocalSegments"]
