"""Hard bounds that more than one package relies on, in one place.

The ground floor: this module imports nothing from partlog, so the RPC
schemas (:mod:`partlog.rpc.methods`), the controller, the produce pipeline,
walmgr and the tools can all share one number without importing each other.
Each name carries its unit; a bound that only one package uses stays beside
the code that enforces it.  Where the code relies on a relation between two
bounds, it is asserted below, at import.
"""

from __future__ import annotations

__all__ = [
    "ABORTED_TXNS_PER_FETCH_MAX",
    "AZ_CHARS_MAX",
    "BROKERS_MAX",
    "BROKER_ID_MAX",
    "HOST_CHARS_MAX",
    "PARTITIONS_PER_CLUSTER_MAX",
    "PARTITIONS_PER_TOPIC_MAX",
    "PORT_MAX",
    "SEGMENT_BATCHES_MAX",
    "TOPICS_PER_REQUEST_MAX",
]

# Kafka broker ids are int32s >= 0.
BROKER_ID_MAX = (1 << 31) - 1
# Registered brokers stay known after they die (replica lists name them),
# so distinct broker ids are bounded: a cluster of ten thousand brokers is
# far beyond what one controller process serving full snapshots is for.
BROKERS_MAX = 10_000
# AZ names and host names: DNS names are at most 253 characters.
AZ_CHARS_MAX = 255
HOST_CHARS_MAX = 255
# TCP ports are 16-bit.
PORT_MAX = 65_535

# Every change ships the full snapshot to every broker (KRaft ships deltas):
# about 30 bytes a partition, so 100k partitions are ~3 MB a snapshot, well
# under the 64 MiB RPC frame.  Kafka has no per-topic limit; ours keeps one
# create_topics from taking the whole budget by accident.
PARTITIONS_PER_CLUSTER_MAX = 100_000
PARTITIONS_PER_TOPIC_MAX = 10_000
# One create_topics or delete_topics request names at most this many topics.
TOPICS_PER_REQUEST_MAX = 1_000

# Batches per WAL segment: its commit RPC to one leader carries at most this
# many (the RPC schema's bound).  A 4 MiB buffer of the smallest batches
# (61-byte headers, no records) holds ~69,000; a larger buffer rotates here first.
SEGMENT_BATCHES_MAX = 100_000

# Aborted transactions one partition's READ_COMMITTED fetch answer lists
# (Kafka has no bound).  A read that would need more ends its range earlier,
# so a read_committed consumer never sees an aborted record for want of one
# (partlog.store.reads.within_aborted_max); the RPC's fetch answer schema
# holds at most this many.
ABORTED_TXNS_PER_FETCH_MAX = 10_000

# A topic's partitions are taken from the cluster's budget.
assert 0 < PARTITIONS_PER_TOPIC_MAX <= PARTITIONS_PER_CLUSTER_MAX
# BROKERS_MAX distinct broker ids must fit the id space.
assert 0 < BROKERS_MAX <= BROKER_ID_MAX + 1
