"""The options of a ``partlog cluster`` run (:class:`ClusterOptions`),
checked whole when built, before anything starts: each against its bound
below, and against each other (a ``ValueError`` naming the flag)."""

from __future__ import annotations

from dataclasses import dataclass

from partlog.acl import AuthorizerConfig
from partlog.kafka.batch_header import INT32_MAX
from partlog.kafka.topic_config import MAX_MESSAGE_BYTES_DEFAULT, SEGMENT_BYTES_MIN
from partlog.kafka_front.apis import NUM_PARTITIONS_DEFAULT
from partlog.kafka_front.listeners import ListenerSecurity
from partlog.limits import PARTITIONS_PER_TOPIC_MAX

# Demo-sized deletion safety (brokers and walmgr agree on the deadline).
DEMO_COMMIT_DEADLINE_MS = 2_000
DEMO_MAX_CLOCK_SKEW_MS = 500
DEMO_GRACE_MS = 500
# The release grace scaled as the deadlines (docs/design/release-grace.md):
# answers older than half of it are dropped, walmgr's answers span less.
DEMO_RELEASE_GRACE_MS = 3_000
DEMO_REPLICA_ANSWER_AGE_MAX_MS = 1_400
DEMO_VERDICT_WINDOW_MS = 1_400
# Bounds on the options (flags are checked against them, so a typo such as
# --message-bytes 1e8 is a clear error, not a 23 GB allocation):
# a record must fit a batch under the topic's max.message.bytes (Kafka's
# default, 1 MiB + 12) with its framing;
MESSAGE_BYTES_MAX = MAX_MESSAGE_BYTES_DEFAULT - 1024
# every broker, producer and the walmgr run in one process on one event loop;
BROKERS_MAX = 64
PRODUCERS_MAX = 1_024
RATE_PER_PRODUCER_MAX = 1_000_000  # records/s
# a day of producing is a soak test; more is a mistake;
DURATION_S_MAX = 86_400.0
# the WAL buffer must rotate well inside the demo commit deadline, or every
# commit of a segment is refused as too old.
COMMIT_INTERVAL_MS_MAX = DEMO_COMMIT_DEADLINE_MS // 2
# Demo-sized failure detection: a dead broker is fenced (and its partitions
# get new leaders) within the session timeout.  Kafka's default
# broker.session.timeout.ms is 9 s; brokers heartbeat every 500 ms here, so
# the session must span a few heartbeats, and a minute is already slow.
DEMO_BROKER_SESSION_TIMEOUT_MS = 3_000
BROKER_SESSION_TIMEOUT_MS_MIN = 2_000
BROKER_SESSION_TIMEOUT_MS_MAX = 60_000


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    azs: int = 3
    brokers_per_az: int = 2
    partitions: int = 12
    producers_per_az: int = 2
    rate_per_producer: int = 500  # records/s
    message_bytes: int = 100
    duration_s: float = 10.0
    data_dir: str | None = None
    store_url: str | None = None
    commit_interval_ms: int = 250
    buffer_bytes_max: int = 4 * 1024 * 1024
    sync: bool = True
    seed: int = 0
    # One replica per AZ by default (at most the number of brokers).
    replication_factor: int = 3
    # Kill a random broker every this many seconds and restart it after
    # restart_after_s (0: never).
    kill_broker_every_s: float = 0.0
    restart_after_s: float = 1.0
    walmgr: bool = True
    # Share of WAL files whose commits are dropped after upload (orphans).
    orphan_rate: float = 0.0
    # Every broker gets a Kafka listener (partlog.kafka_front).
    kafka: bool = True
    # Their security protocols (partlog.kafka_front.listeners), one listener
    # each, comma-separated ("SASL_SSL,PLAINTEXT"; the first is kafka_port),
    # and their settings.
    kafka_protocol: str = "PLAINTEXT"
    kafka_security: ListenerSecurity | None = None
    # Cluster metadata: "" for the embedded controller, "etcd" for a
    # 3-member etcd on loopback started here, or an etcd:// URL (each run
    # then uses its own sub-prefix of the URL's: a new cluster).
    metadata: str = ""
    # With "etcd": kill an etcd follower at 25% of the run (back at 40%),
    # then the etcd leader at 55% (back at 75%).
    etcd_member_faults: bool = False
    # With "etcd": every etcd member down for this many seconds from 30% of the run.
    etcd_outage_s: float = 0.0
    # Kafka's authorizer on every broker (None: off); the brokers' own RPC
    # principal is allowed by LocalCluster itself (partlog.tools.local_cluster).
    authorizer: AuthorizerConfig | None = None
    # Tiered segments (docs/design/tiered.md): > 0 sets remote.storage.enable
    # on the topic with this segment.ms and segment.bytes, and the report
    # gives the object census (partlog.tools.cluster_census); 0: off.
    tiering_segment_ms: int = 0
    tiering_segment_bytes: int = SEGMENT_BYTES_MIN
    # Kafka's num.partitions: partitions of a topic the brokers auto-create
    # (librdkafka's test suite expects 4: scripts/conformance).
    num_partitions: int = NUM_PARTITIONS_DEFAULT
    # Kafka's auto.create.topics.enable (the suite's "noautocreate" scenario
    # turns it off).
    auto_create_topics: bool = True
    # Kafka's broker.session.timeout.ms: how long a broker that stopped
    # heartbeating (or whose etcd lease lapsed) keeps its registration.
    broker_session_timeout_ms: int = DEMO_BROKER_SESSION_TIMEOUT_MS

    def __post_init__(self) -> None:
        if not 0.0 <= self.orphan_rate <= 1.0:
            raise ValueError(f"orphan-rate must be in [0, 1], got {self.orphan_rate}")
        if self.orphan_rate and not self.walmgr:
            raise ValueError("orphan-rate needs walmgr (it deletes the orphans)")
        for name in (
            "azs",
            "brokers_per_az",
            "partitions",
            "producers_per_az",
            "replication_factor",
            "rate_per_producer",
            "message_bytes",
            "commit_interval_ms",
            "num_partitions",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{_flag(name)} must be > 0, got {getattr(self, name)}")
        bounds: dict[str, tuple[float, float]] = {
            "azs": (self.azs, BROKERS_MAX),
            "brokers_per_az": (self.azs * self.brokers_per_az, BROKERS_MAX),
            "partitions": (self.partitions, PARTITIONS_PER_TOPIC_MAX),
            "num_partitions": (self.num_partitions, PARTITIONS_PER_TOPIC_MAX),
            "producers_per_az": (self.azs * self.producers_per_az, PRODUCERS_MAX),
            "rate_per_producer": (self.rate_per_producer, RATE_PER_PRODUCER_MAX),
            "message_bytes": (self.message_bytes, MESSAGE_BYTES_MAX),
            "duration_s": (self.duration_s, DURATION_S_MAX),
            "commit_interval_ms": (self.commit_interval_ms, COMMIT_INTERVAL_MS_MAX),
        }
        for name, (value, limit) in bounds.items():
            if value > limit:
                what = {"brokers_per_az": "brokers in all", "producers_per_az": "producers in all"}.get(
                    name, _flag(name)
                )
                raise ValueError(f"{what} may be at most {_num(limit)}, got {_num(value)}")
        if self.tiering_segment_ms < 0:
            raise ValueError(f"tiering-segment-ms must be >= 0, got {self.tiering_segment_ms}")
        if not SEGMENT_BYTES_MIN <= self.tiering_segment_bytes <= INT32_MAX:
            raise ValueError(
                f"tiering-segment-bytes must be in [{SEGMENT_BYTES_MIN:,}, {INT32_MAX:,}], "
                f"got {self.tiering_segment_bytes:,}"
            )
        if self.duration_s <= 0:
            raise ValueError(f"duration must be > 0, got {self.duration_s}")
        if not BROKER_SESSION_TIMEOUT_MS_MIN <= self.broker_session_timeout_ms <= BROKER_SESSION_TIMEOUT_MS_MAX:
            raise ValueError(
                f"broker-session-timeout-ms must be in [{BROKER_SESSION_TIMEOUT_MS_MIN:,}, "
                f"{BROKER_SESSION_TIMEOUT_MS_MAX:,}], got {self.broker_session_timeout_ms:,}"
            )
        if self.kill_broker_every_s < 0 or self.restart_after_s < 0:
            raise ValueError("kill-broker-every and restart-after must be >= 0")
        if self.metadata not in ("", "etcd"):
            from partlog.controller.etcd_layout import parse_etcd_url

            parse_etcd_url(self.metadata)  # MetadataError (a ValueError) names what is wrong
        if (self.etcd_member_faults or self.etcd_outage_s) and self.metadata != "etcd":
            raise ValueError("etcd-member-faults and etcd-outage-s need --metadata etcd (an etcd started here)")
        if self.etcd_member_faults and self.etcd_outage_s:
            raise ValueError("give one of etcd-member-faults and etcd-outage-s per run")
        if not 0 <= self.etcd_outage_s <= self.duration_s:
            raise ValueError(f"etcd-outage-s must be in [0, duration], got {self.etcd_outage_s:g}")


def _num(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _flag(field_name: str) -> str:
    """The command-line flag of a ClusterOptions field."""
    flags = {"rate_per_producer": "rate", "duration_s": "duration"}
    return "--" + flags.get(field_name, field_name).replace("_", "-")
