"""The Fetch API of a broker's front end: the request's partitions checked
(READ on the topic, the partition known, the leader epoch current, KIP-392's
nearest replica), read through the port, and answered within the client's
fetch session (:mod:`partlog.kafka_front.fetch_sessions`, KIP-227).

Every partition a fetch reads, whether the request names it or the session
holds it, is authorized and resolved on that fetch as a sessionless fetch's
are: a session keeps offsets and what the client was last told, never a
right to read.  The cache is the listener's (one per broker front end); its
sizes and counts are exported by :class:`FetchSessionCollector`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from partlog.acl import AclOperation
from partlog.kafka.errors import Errors, peer_error
from partlog.kafka.leader_epochs import diverging_epoch
from partlog.kafka.records import FindBatchRequest, IsolationLevel, TopicIdPartition
from partlog.kafka_front.fetch_sessions import (
    FETCH_SESSION_CACHE_SLOTS_DEFAULT,
    FETCH_SESSION_EVICTION_MS_DEFAULT,
    FetchMeta,
    FetchSessionCache,
    Key,
    PartitionAnswer,
    PartitionRequest,
    SessionError,
)
from partlog.kafka_front.handler import ApiHandlers, Session, duration_ms, kafka_error
from partlog.kafka_front.port import BrokerPort
from partlog.kafka_front.read_replica import preferred_read_replica

log = logging.getLogger(__name__)

# Kafka's replica.fetch.wait.max.ms bound on a consumer's max_wait_ms here.
FETCH_MAX_WAIT_MS_MAX = 30_000
# Kafka's fetch.max.bytes broker default: the most one fetch answers.
FETCH_MAX_BYTES = 55 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """The fetch path's settings (FrontConfig's)."""

    rack_aware_replica_selector: bool = True
    session_cache_slots: int = FETCH_SESSION_CACHE_SLOTS_DEFAULT
    session_eviction_ms: int = FETCH_SESSION_EVICTION_MS_DEFAULT


class FetchApi(ApiHandlers):
    """Fetch (API key 1) over the broker's port, with the listener's session cache."""

    def __init__(self, broker: BrokerPort, config: FetchConfig) -> None:
        super().__init__(broker)
        self.config = config
        self.sessions = FetchSessionCache(
            lambda bits: broker.entropy.randbits(bits),
            slots=config.session_cache_slots,
            eviction_ms=config.session_eviction_ms,
        )

    def _az_of(self, broker_id: int) -> str | None:
        b = self.broker.metadata.broker(broker_id)
        return None if b is None else b.az

    def _now_ms(self) -> int:
        return int(self.broker.clock.monotonic() * 1000)

    async def fetch(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        meta = self.broker.metadata
        rack = getattr(body, "rack_id", "") or None
        if rack:
            session.az = rack
        wanted: list[tuple[Key, PartitionRequest]] = [
            ((ft.topic, int(fp.partition)), _partition_request(fp)) for ft in body.topics for fp in ft.partitions
        ]
        forgotten = [(t.topic, int(p)) for t in getattr(body, "forgotten_topics_data", ()) for p in t.partitions]
        fmeta = FetchMeta(
            int(getattr(body, "session_id", 0)), int(getattr(body, "session_epoch", -1)), req.api_version,
            session.principal,
        )  # fmt: skip
        ctx = self.sessions.new_context(fmeta, wanted, forgotten, self._now_ms())
        if isinstance(ctx, SessionError):
            return {"throttle_time": 0, "error_code": int(ctx.error), "session_id": 0, "responses": []}
        max_wait_ms = min(max(0, duration_ms(body.max_wait)), FETCH_MAX_WAIT_MS_MAX)
        # Kafka's fetch.max.bytes caps what a client asks (55 MiB).
        max_bytes = min(max(1, int(getattr(body, "max_bytes", FETCH_MAX_BYTES))), FETCH_MAX_BYTES)
        asked: list[tuple[Key, PartitionRequest, TopicIdPartition | None, Errors | None]] = []
        # KIP-392: partitions this client should fetch from another broker.
        redirect: dict[TopicIdPartition, int] = {}
        nearest = rack is not None and req.api_version >= 11 and self.config.rack_aware_replica_selector
        me = self.broker.broker_id
        readable: dict[str, bool] = {}
        for key, pr in ctx.fetching:
            name = key[0]
            if name not in readable:
                readable[name] = self.authz.topic(session, AclOperation.READ, name)
            tp = self._tp(name, key[1])
            error: Errors | None = None
            if not readable[name]:
                error = Errors.TOPIC_AUTHORIZATION_FAILED
            elif tp is None:
                error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                info = meta.partition(tp)
                cle = pr.current_leader_epoch
                if info is not None and cle >= 0 and cle != info.leader_epoch:
                    error = Errors.FENCED_LEADER_EPOCH if cle < info.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH
                elif nearest and (to := preferred_read_replica(info, self._az_of, rack, me)) >= 0:
                    redirect[tp] = to
            asked.append((key, pr, tp, error))
        # Kafka's isolation_level (v4+): READ_COMMITTED reads up to the last
        # stable offset and learns the aborted transactions in the range.
        committed = int(getattr(body, "isolation_level", 0)) == IsolationLevel.READ_COMMITTED
        isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        reqs = [
            FindBatchRequest(tp, pr.fetch_offset, min(max(1, pr.max_bytes), FETCH_MAX_BYTES), isolation)
            for _, pr, tp, err in asked
            if err is None and tp is not None and tp not in redirect
        ]
        answers = await self.broker.fetch_routed(
            reqs, max_wait_ms=max_wait_ms, min_bytes=int(body.min_bytes), max_bytes=max_bytes, az=session.az
        )
        it = iter(answers)
        parts: list[dict[str, Any]] = []
        told: list[PartitionAnswer] = []
        for (_, index), pr, tp, err in asked:
            part: dict[str, Any] = {
                "partition_index": index,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": b"",
            }
            if err is not None:
                part["error_code"] = int(err)
            elif tp in redirect:
                # No records: the client fetches them from the replica named.
                part.update(error_code=0, preferred_read_replica=redirect[tp])
            else:
                code, hwm, lso, records, _message, stable, aborted = next(it)
                part.update(
                    error_code=kafka_error(peer_error(code)),
                    high_watermark=hwm,
                    last_stable_offset=stable if stable >= 0 else hwm,
                    log_start_offset=lso,
                    records=records,
                )
                if committed:
                    # Kafka answers null for READ_UNCOMMITTED, the list otherwise.
                    part["aborted_transactions"] = [
                        {"producer_id": pid, "first_offset": first} for pid, first in aborted
                    ]
                last_epoch = pr.last_fetched_epoch
                if code == 0 and last_epoch >= 0 and req.api_version >= 12 and tp is not None:
                    diverging = self._diverging(tp, last_epoch, pr.fetch_offset)
                    if diverging is not None:
                        part.update(diverging_epoch={"epoch": diverging[0], "end_offset": diverging[1]}, records=b"")
            parts.append(part)
            told.append(_told(part))
        session_id, keep = self.sessions.answer(ctx, told, self._now_ms())
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for ((name, _), _, _, _), part, kept in zip(asked, parts, keep, strict=True):
            if kept:
                by_topic.setdefault(name, []).append(part)
        return {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": session_id,
            "responses": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()],
        }

    def _diverging(self, tp: TopicIdPartition, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """Kafka's check on a v12+ fetch: the (epoch, end offset) the
        consumer must truncate to when its last fetched epoch ends before
        its fetch offset in this replica's log; None when it does not (or
        this broker holds no replica to judge by)."""
        broker = self.broker
        if not broker.serves(tp):
            return None
        end = diverging_epoch(
            broker.leader_epoch_cache(tp), broker.log_end_offset(tp), fetch_offset, last_fetched_epoch
        )
        return None if end is None else (end.leader_epoch, end.end_offset)


def _partition_request(fp: Any) -> PartitionRequest:
    return PartitionRequest(
        fetch_offset=int(fp.fetch_offset),
        max_bytes=int(fp.partition_max_bytes),
        log_start_offset=int(getattr(fp, "log_start_offset", -1)),
        current_leader_epoch=int(getattr(fp, "current_leader_epoch", -1)),
        last_fetched_epoch=int(getattr(fp, "last_fetched_epoch", -1)),
    )


def _told(part: Mapping[str, Any]) -> PartitionAnswer:
    return PartitionAnswer(
        error=int(part["error_code"]),
        high_watermark=int(part["high_watermark"]),
        last_stable_offset=int(part["last_stable_offset"]),
        log_start_offset=int(part["log_start_offset"]),
        records_bytes=len(part["records"] or b""),
        preferred_read_replica=int(part["preferred_read_replica"]),
        diverging="diverging_epoch" in part,
    )


class FetchSessionCollector(Collector):
    """The fetch session cache at scrape time."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        c = self._cache
        yield GaugeMetricFamily("partlog_kafka_fetch_sessions", "incremental fetch sessions (KIP-227) held",
                                value=len(c))  # fmt: skip
        yield GaugeMetricFamily(
            "partlog_kafka_fetch_session_partitions", "partitions in the held fetch sessions", value=c.partitions
        )
        yield GaugeMetricFamily(
            "partlog_kafka_fetch_session_slots", "max.incremental.fetch.session.cache.slots", value=c.slots
        )
        for name, help_text in (
            ("created", "fetch sessions created by full fetches"),
            ("evictions", "fetch sessions evicted for a new one (Kafka's IncrementalFetchSessionEvictionsPerSec)"),
            ("incremental", "incremental fetches served from a session"),
            ("not_found", "incremental fetches answered FETCH_SESSION_ID_NOT_FOUND"),
            ("invalid_epoch", "incremental fetches answered INVALID_FETCH_SESSION_EPOCH"),
        ):
            yield CounterMetricFamily(f"partlog_kafka_fetch_sessions_{name}", help_text, value=c.stats[name])


__all__ = ["FETCH_MAX_BYTES", "FETCH_MAX_WAIT_MS_MAX", "FetchApi", "FetchConfig", "FetchSessionCollector"]
