"""The client library's consumer: :class:`Consumer`, fetching assigned
partitions from their leaders over the broker RPC, in order.

A fetch that meets a corrupt batch raises :class:`CorruptRecordError` with
the good records fetched with it; ``auto_offset_reset`` is Kafka's
``auto.offset.reset`` for a position the log start moved past.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from ssl import SSLContext

from partlog.client.connections import (
    REQUEST_TIMEOUT_MS_DEFAULT,
    STALE_METADATA,
    ClusterView,
    Connections,
    checked_answer,
)
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import ConsumerRecord, read_records
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcConnectionError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.wire import WireError, enc_tp

log = logging.getLogger(__name__)

# Kafka's consumer fetch.max.bytes and max.partition.fetch.bytes defaults.
FETCH_MAX_BYTES_DEFAULT = 50 * 1024 * 1024
PARTITION_FETCH_MAX_BYTES_DEFAULT = 1024 * 1024
# Kafka's auto.offset.reset values ("none": raise, here: keep the error).
AUTO_OFFSET_RESETS = ("earliest", "latest", "none")
# Kafka's isolation.level values.
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
# Resets a consumer remembers per partition (the latest ones).
RESETS_KEPT = 16


class CorruptRecordError(Exception):
    """A fetch met a corrupt or truncated batch (CORRUPT_MESSAGE): the
    consumer's position stays before it.  ``partitions`` maps each partition
    to the broker's message (object key and byte offset); ``records`` are
    the good records the same poll fetched."""

    def __init__(self, partitions: dict[TopicIdPartition, str], records: list[ConsumerRecord]) -> None:
        super().__init__("; ".join(f"{tp}: {why}" for tp, why in partitions.items()))
        self.partitions = partitions
        self.records = records


class Consumer:
    """Fetches assigned partitions from their leaders, in order."""

    def __init__(
        self,
        bootstrap: tuple[str, int] | Sequence[tuple[str, int]],
        *,
        secret: bytes | None = None,
        ssl: SSLContext | None = None,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = FETCH_MAX_BYTES_DEFAULT,
        partition_max_bytes: int = PARTITION_FETCH_MAX_BYTES_DEFAULT,
        auto_offset_reset: str = "none",
        isolation_level: str = "read_uncommitted",
    ) -> None:
        if auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise ValueError(f"auto_offset_reset must be one of {AUTO_OFFSET_RESETS}, got {auto_offset_reset!r}")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {ISOLATION_LEVELS}, got {isolation_level!r}")
        # Kafka's isolation.level: read_committed reads up to the last stable
        # offset and drops the records of aborted transactions.
        self.read_committed = isolation_level == "read_committed"
        self.conns = Connections(bootstrap, secret=secret, ssl=ssl)
        # Kafka's auto.offset.reset, applied when a fetch answers
        # OFFSET_OUT_OF_RANGE (retention or DeleteRecords moved the log start
        # past the position): "earliest" moves to the log start, "latest" to
        # the HWM, "none" leaves the position and keeps the error in errors.
        self.auto_offset_reset = auto_offset_reset
        # Partition -> (from, to, high watermark) of its latest resets.
        self.resets: dict[TopicIdPartition, deque[tuple[int, int, int]]] = {}
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.positions: dict[TopicIdPartition, int] = {}
        self.high_watermarks: dict[TopicIdPartition, int] = {}
        self.errors: dict[TopicIdPartition, Errors] = {}
        # Partitions whose last fetch met a corrupt batch (poll raises).
        self.corrupt: dict[TopicIdPartition, str] = {}
        self._metadata_stale = False

    async def start(self) -> None:
        await self.conns.load_metadata(None)

    @property
    def view(self) -> ClusterView:
        assert self.conns.view is not None, "start() first"
        return self.conns.view

    def assign(self, tps: Sequence[TopicIdPartition], offset: int = 0) -> None:
        for tp in tps:
            self.positions[tp] = offset

    async def poll(self) -> list[ConsumerRecord]:
        """One fetch per leader broker of the assigned partitions."""
        if self._metadata_stale:
            try:
                await self.conns.load_metadata(None)
                self._metadata_stale = False
            except (RpcConnectionError, RpcTimeoutError, RpcRemoteError, OSError) as e:
                log.info("metadata refresh failed: %s", e)
                await asyncio.sleep(0.1)
                return []
        by_leader: dict[int, list[TopicIdPartition]] = {}
        for tp in self.positions:
            name = next(n for n, (tid, _) in self.view.topics.items() if tid == tp.topic_id)
            leader = self.view.topics[name][1][tp.partition].leader
            if leader < 0 or leader not in self.view.brokers:
                self._metadata_stale = True
                continue
            by_leader.setdefault(leader, []).append(tp)
        answers = await asyncio.gather(*(self._fetch(b, tps) for b, tps in by_leader.items()))
        records = [r for rs in answers for r in rs]
        if self.corrupt:
            # As Kafka's consumer: a corrupt batch is an error for the caller,
            # not a retry (the bytes will not change).  The records fetched
            # with it are handed over with the error, so none is lost.
            corrupt, self.corrupt = self.corrupt, {}
            raise CorruptRecordError(corrupt, records)
        return records

    async def _fetch(self, broker: int, tps: list[TopicIdPartition]) -> list[ConsumerRecord]:
        try:
            client = await self.conns.broker(broker)
            body = await client.call(
                "fetch",
                {
                    "partitions": [[*enc_tp(tp), self.positions[tp], self.partition_max_bytes] for tp in tps],
                    "max_wait_ms": self.max_wait_ms,
                    "min_bytes": self.min_bytes,
                    "max_bytes": self.max_bytes,
                    "isolation": int(self.read_committed),
                },
                timeout_ms=self.max_wait_ms + REQUEST_TIMEOUT_MS_DEFAULT,
            )
            checked_answer("fetch", body)
            if len(body["partitions"]) != len(tps):
                raise WireError(f"fetch answer: {len(body['partitions'])} partitions for {len(tps)} asked")
        except (RpcConnectionError, OSError):
            await self.conns.drop(broker)
            self._metadata_stale = True
            await asyncio.sleep(0.05)
            return []
        except (RpcTimeoutError, RpcRemoteError, WireError) as e:
            log.warning("fetch from broker %d failed: %s", broker, e)
            self._metadata_stale = True
            return []
        out: list[ConsumerRecord] = []
        for tp, (err, hwm, lso, records, msg, _stable, aborted) in zip(tps, body["partitions"], strict=True):
            error = Errors(err) if err in Errors._value2member_map_ else Errors.UNKNOWN_SERVER_ERROR
            if error == Errors.CORRUPT_MESSAGE:
                self.corrupt[tp] = f"offset {self.positions[tp]}: {msg}"
            if error == Errors.OFFSET_OUT_OF_RANGE and self.auto_offset_reset != "none" and lso >= 0:
                to = lso if self.auto_offset_reset == "earliest" else max(hwm, lso)
                if to != self.positions[tp]:
                    self.resets.setdefault(tp, deque(maxlen=RESETS_KEPT)).append((self.positions[tp], to, hwm))
                    self.positions[tp] = to
                    continue
            if error != Errors.NONE:
                self.errors[tp] = error
                if error in STALE_METADATA:
                    self._metadata_stale = True
                continue
            self.high_watermarks[tp] = hwm
            got, after = read_records(tp, records, self.positions[tp], aborted if self.read_committed else None)
            self.positions[tp] = max(self.positions[tp], after)
            out += got
        return out

    async def close(self) -> None:
        await self.conns.close()


__all__ = [
    "AUTO_OFFSET_RESETS",
    "FETCH_MAX_BYTES_DEFAULT",
    "PARTITION_FETCH_MAX_BYTES_DEFAULT",
    "RESETS_KEPT",
    "Consumer",
    "CorruptRecordError",
]
