"""The internal topics of the coordinators (``__consumer_offsets``,
``__transaction_state``): made on first use, the coordinator of a key, and
a partition read back as a coordinator that has just become its leader
does.

:func:`read_to_end` replays the partition from its log start to the log end
it had when the read began: every acknowledged write is there, since a new
leader comes from the ISR.  Reads stop at the high watermark, so it first
waits for the HWM to reach that log end (the followers' next fetches move
it).  :func:`batches` splits a fetch answer into whole v2 batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

from partlog.controller.cluster_meta import TopicAdmin, TopicInfo
from partlog.kafka.batch_header import HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from partlog.kafka.errors import Errors
from partlog.kafka.records import FindBatchRequest, TopicIdPartition
from partlog.kafka_front.port import BrokerPort

log = logging.getLogger(__name__)

# One read of the partition while loading it.
LOAD_FETCH_BYTES = 4 * 1024 * 1024
# How long a load waits for the new leader's high watermark to reach its log end.
LOAD_HWM_WAIT_MS = 30_000


def internal_topic(broker: BrokerPort, name: str) -> TopicInfo | None:
    for t in broker.metadata.topics():
        if t.name == name:
            return t
    return None


async def ensure_internal_topic(
    broker: BrokerPort, name: str, partitions: int, replication_factor: int, creating: asyncio.Lock
) -> TopicInfo | None:
    """The topic ``name``, created through the controller on first use with
    ``min(replication_factor, brokers)`` replicas (as Kafka creates its
    internal topics on the first FindCoordinator); None when it cannot be
    (a static cluster file that lacks it, a controller error)."""
    t = internal_topic(broker, name)
    if t is not None:
        return t
    metadata = broker.metadata
    if not isinstance(metadata, TopicAdmin):
        return None
    async with creating:
        t = internal_topic(broker, name)
        if t is None:
            rf = min(replication_factor, max(1, len(broker.metadata.brokers())))
            answer = (await metadata.create_topics({name: (partitions, rf)}))[name]
            if isinstance(answer, Errors):
                log.warning("cannot create %s: %s", name, answer.name)
                return None
            t = answer
    return t


def coordinator_of(topic: TopicInfo | None, index: int) -> tuple[Errors, int]:
    """(error, broker id) of the coordinator on partition ``index`` of ``topic``."""
    if topic is None:
        return Errors.COORDINATOR_NOT_AVAILABLE, -1
    leader = topic.partitions[index].leader
    if leader < 0:
        return Errors.COORDINATOR_NOT_AVAILABLE, -1
    return Errors.NONE, leader


async def read_to_end(broker: BrokerPort, tp: TopicIdPartition, apply: Callable[[bytes, int], int]) -> int:
    """Feed ``apply(data, offset)`` the partition's batches from its log
    start to its log end now; ``apply`` returns the offset after the last
    batch it consumed.  Returns that log end; raises RuntimeError when the
    partition cannot be read (the caller drops the load and tries again)."""
    offset = broker.log_start_offset(tp)
    end = broker.log_end_offset(tp)
    deadline = broker.clock.monotonic() + LOAD_HWM_WAIT_MS / 1000
    while True:
        # Taken before the read: an HWM move in between sets it.
        moved = broker.new_data()
        if broker.high_watermark(tp) >= end:
            break
        left = deadline - broker.clock.monotonic()
        if left <= 0:
            raise RuntimeError(f"{tp}: the high watermark did not reach {end} in {LOAD_HWM_WAIT_MS} ms")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await moved.wait()
    while offset < end:
        [row] = (
            await broker.fetch([FindBatchRequest(tp, offset, LOAD_FETCH_BYTES)], max_wait_ms=0, min_bytes=0,
                               max_bytes=LOAD_FETCH_BYTES)
        )["partitions"]  # fmt: skip
        code, records, message = row[0], row[3], row[4]
        if code != 0:
            raise RuntimeError(f"reading {tp} at {offset}: {Errors(code).name}: {message}")
        after = apply(records, offset)
        if after <= offset:
            raise RuntimeError(f"reading {tp} at {offset}: no batch below {end}")
        offset = after
    return end


def batches(data: bytes) -> Iterator[tuple[BatchHeader, bytes]]:
    """The whole v2 batches of a fetch answer, with their headers; a
    truncated or malformed tail ends the iteration."""
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        header = BatchHeader.parse(data[pos : pos + HEADER_SIZE])
        end = pos + LOG_OVERHEAD + header.batch_length
        if end > len(data) or end <= pos or header.last_offset_delta < 0:
            return
        yield header, data[pos:end]
        pos = end


__all__ = [
    "LOAD_FETCH_BYTES",
    "LOAD_HWM_WAIT_MS",
    "batches",
    "coordinator_of",
    "ensure_internal_topic",
    "internal_topic",
    "read_to_end",
]
