"""The Kafka listener's Prometheus metrics: its counters and gauges
(connections, requests, limits reached) and the transaction coordinator's
state, collected at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from partlog.kafka_front.txn_coordinator import TxnCoordinator
from partlog.txn.coordinator import TRANSACTIONAL_IDS_MAX

# Seconds: a coordinator's record is one WAL file's upload, commit and
# replication (tens to hundreds of ms); markers a round to each leader.
_TXN_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4)


class ListenerMetrics:
    def __init__(self, registry: CollectorRegistry, encode_in_thread_items: int) -> None:
        self.registry = r = registry
        self.connections = Gauge("partlog_kafka_connections", "open Kafka client connections", registry=r)
        self.connections_refused = Counter(
            "partlog_kafka_connections_refused",
            "Kafka connections refused at accept, by limit",
            ["limit"],
            registry=r,
        )
        self.requests = Counter("partlog_kafka_requests", "Kafka requests answered, by API", ["api"], registry=r)
        self.requests_unsupported = Counter(
            "partlog_kafka_requests_unsupported", "Kafka requests of an API or version not served", registry=r
        )
        self.encoded_in_thread = Counter(
            "partlog_kafka_answers_encoded_in_thread",
            f"answers of more than {encode_in_thread_items} items built and encoded off the event loop",
            registry=registry,
        )
        self.bad_requests = Counter(
            "partlog_kafka_bad_requests", "Kafka connections closed for a malformed or oversized request", registry=r
        )
        self.idle_closed = Counter(
            "partlog_kafka_idle_closed", "Kafka connections closed after connections.max.idle.ms", registry=r
        )
        self.frame_deadline_closed = Counter(
            "partlog_kafka_frame_deadline_closed",
            "Kafka connections closed because a started request did not arrive within the frame deadline",
            registry=r,
        )
        self.request_bytes = Gauge(
            "partlog_kafka_request_bytes_in_flight", "bytes of Kafka requests held (read or being read)", registry=r
        )
        self.request_bytes_max = Gauge(
            "partlog_kafka_request_bytes_in_flight_max", "the listener's request byte budget", registry=r
        )
        self.txn_step_seconds = Histogram(
            "partlog_kafka_txn_step_seconds",
            "steps of transactions at this coordinator: write_<kind> a __transaction_state record durable "
            "(write_add, write_end the Prepare*, write_complete, ...), markers all written, "
            "prepared_to_complete from Prepare* durable to Complete* durable",
            ["step"],
            buckets=_TXN_STEP_BUCKETS,
            registry=r,
        )
        self.auth_deadline_closed = Counter(
            "partlog_kafka_auth_deadline_closed",
            "Kafka connections closed because TLS or SASL was not done within the listener's auth deadline",
            registry=r,
        )
        self.auth_failed = Counter(
            "partlog_kafka_auth_failed",
            "Kafka connections closed for failed authentication (SASL or the TLS principal), by listener",
            ["listener"],
            registry=r,
        )
        self.reauthentications = Counter(
            "partlog_kafka_reauthentications",
            "SASL re-authentications completed on open connections (KIP-368, connections.max.reauth.ms)",
            registry=r,
        )
        self.expired_sessions_closed = Counter(
            "partlog_kafka_expired_sessions_closed",
            "Kafka connections closed because a request came after its SASL session expired "
            "(connections.max.reauth.ms; Kafka's expired-connections-killed-count)",
            registry=r,
        )
        self.request_bytes_waits = Counter(
            "partlog_kafka_request_bytes_waits",
            "times a connection waited, unread, for room in the request byte budget",
            registry=r,
        )


class TxnCollector(Collector):
    """The transaction coordinator's state at scrape time: transactional
    ids by state (bounded per coordinator partition by
    ``TRANSACTIONAL_IDS_MAX``), markers written and retried, timeouts."""

    def __init__(self, txns: TxnCoordinator) -> None:
        self._txns = txns

    def collect(self) -> Iterator[Metric]:
        by_state = GaugeMetricFamily(
            "partlog_kafka_transactional_ids", "transactional ids this broker coordinates, by state", labels=["state"]
        )
        counts: dict[str, int] = {}
        for meta in self._txns.transactions_here()[1]:
            counts[meta.state.kafka_name] = counts.get(meta.state.kafka_name, 0) + 1
        for state, n in sorted(counts.items()):
            by_state.add_metric([state], n)
        yield by_state
        yield GaugeMetricFamily(
            "partlog_kafka_transactional_ids_per_partition_max",
            "limit of transactional ids per __transaction_state partition",
            value=TRANSACTIONAL_IDS_MAX,
        )
        stats = self._txns.stats
        for name, help_text in (
            ("markers_written", "transaction markers written by this coordinator"),
            ("marker_retries", "transaction markers sent again after a retriable error"),
            ("timeouts", "transactions this coordinator aborted at their timeout"),
            ("expirations", "transactional ids expired (transactional.id.expiration.ms)"),
            ("concurrent_transactions", "AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS (the client retries)"),
            ("adds_held", "AddPartitionsToTxn held while the id's previous transaction completed"),
        ):
            yield CounterMetricFamily(f"partlog_kafka_txn_{name}", help_text, value=stats[name])
